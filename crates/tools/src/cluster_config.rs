//! The cluster config file (`dara-trace --config dara.toml`) and the command-line options that
//! stand in for or override it (`--check`, `--eventually`, `--setup`, `--cleanup`, `--faults`, `--max-crashes`).
//! The format is documented in docs/cluster.md.
//!
//! A command is either a TOML array (program and arguments, run as they are) or a string (run
//! with `/bin/sh -c`, so redirections and `&&` work). Every command runs in dara-trace's
//! directory with its environment.
use std::path::Path;

use anyhow::{bail, Context};
use dara_model::cluster::{ClusterSpec, FaultBudget, NodeSpec, FAULT_KINDS};
use serde::Deserialize;

/// What the file may say. Unknown keys are errors, so a misspelt `restrat` is not ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The command that exercises the nodes; its exit status is the verdict (before `check`).
    pub workload: Option<Command>,
    pub check: Option<Command>,
    /// A liveness property as a command (`--eventually`): run during the walk after the
    /// workload until it exits 0.
    pub eventually: Option<Command>,
    pub setup: Option<String>,
    pub cleanup: Option<String>,
    #[serde(default, rename = "node")]
    pub nodes: Vec<NodeEntry>,
    #[serde(default)]
    pub faults: FaultEntry,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    pub name: String,
    pub start: Command,
    pub restart: Option<Command>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultEntry {
    #[serde(default)]
    crash: u32,
    #[serde(default)]
    restart: u32,
    #[serde(default)]
    partition: u32,
    #[serde(default)]
    reset: u32,
    #[serde(default)]
    drop: u32,
    #[serde(default)]
    skew: u32,
    #[serde(default)]
    pause: u32,
    #[serde(default, rename = "pause-node")]
    pause_node: u32,
    /// How far a skewed clock is off.
    #[serde(default = "default_skew_ms")]
    skew_ms: u32,
}

fn default_skew_ms() -> u32 {
    DEFAULT_SKEW_MS
}

/// A skewed node's clock is this far ahead or behind unless configured.
pub const DEFAULT_SKEW_MS: u32 = 1000;

/// A command as written: an argument vector, or a shell line.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Command {
    Argv(Vec<String>),
    Shell(String),
}

impl Command {
    pub fn argv(&self) -> Vec<String> {
        match self {
            Command::Argv(v) => v.clone(),
            Command::Shell(line) => shell(line),
        }
    }
}

/// `/bin/sh -c LINE`.
pub fn shell(line: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), line.into()]
}

/// Reads and checks a config file.
pub fn load(path: &Path) -> anyhow::Result<ConfigFile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the config file {}", path.display()))?;
    let config: ConfigFile = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
    let mut names = std::collections::BTreeSet::new();
    for node in &config.nodes {
        if node.name.is_empty() || !names.insert(node.name.as_str()) {
            bail!("{}: every [[node]] needs a name of its own (`{}` is empty or repeated)", path.display(), node.name);
        }
        if node.start.argv().is_empty() {
            bail!("{}: node {} has an empty start command", path.display(), node.name);
        }
    }
    Ok(config)
}

impl FaultEntry {
    fn budget(&self) -> FaultBudget {
        FaultBudget { crashes: self.crash, restarts: self.restart, partitions: self.partition, resets: self.reset, drops: self.drop, skews: self.skew, skew_ms: self.skew_ms, pauses: self.pause, node_pauses: self.pause_node }
    }
}

/// Applies `--faults kind[:N],...` (N defaults to 1; `none` turns every kind off) to `budget`.
pub fn parse_faults(spec: &str, budget: &mut FaultBudget) -> anyhow::Result<()> {
    if spec.trim() == "none" {
        *budget = FaultBudget { skew_ms: budget.skew_ms, ..FaultBudget::default() };
        return Ok(());
    }
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (kind, n) = match item.split_once(':') {
            Some((kind, n)) => (kind, n.parse::<u32>().with_context(|| format!("bad fault budget `{item}`: use KIND:N with N a whole number"))?),
            None => (item, 1),
        };
        match budget.kind_mut(kind) {
            Some(slot) => *slot = n,
            None => bail!("unknown fault kind `{kind}` in --faults: the kinds are {FAULT_KINDS} (or `none`)"),
        }
    }
    Ok(())
}

/// What the command line says about a cluster run.
#[derive(Debug, Default)]
pub struct ClusterOptions<'a> {
    pub config: Option<&'a Path>,
    pub check: Option<&'a str>,
    pub eventually: Option<&'a str>,
    pub setup: Option<&'a str>,
    pub cleanup: Option<&'a str>,
    pub faults: Option<&'a str>,
    pub max_crashes: Option<u32>,
}

/// The run a config file and the options describe.
pub struct ClusterRun {
    /// `None`: a plain run (no nodes, no check).
    pub spec: Option<ClusterSpec>,
    /// The workload from the file, used when no command follows `--`.
    pub workload: Option<Vec<String>>,
    pub setup: Option<String>,
    pub cleanup: Option<String>,
    /// The `pause` budget (`--faults pause:N`), for any run, with or without nodes.
    pub pauses: u32,
}

/// Combines the config file (if any) with the options; options win.
pub fn resolve(options: &ClusterOptions<'_>) -> anyhow::Result<ClusterRun> {
    let file = match options.config {
        Some(path) => load(path)?,
        None => ConfigFile::default(),
    };
    let mut budget = file.faults.budget();
    if let Some(spec) = options.faults {
        parse_faults(spec, &mut budget)?;
    }
    if let Some(n) = options.max_crashes {
        budget.crashes = n;
    }
    let pauses = std::mem::take(&mut budget.pauses);
    let nodes: Vec<NodeSpec> = file
        .nodes
        .iter()
        .map(|n| NodeSpec { name: n.name.clone(), start: n.start.argv(), restart: n.restart.as_ref().map(Command::argv).unwrap_or_default() })
        .collect();
    if budget.any() && nodes.is_empty() {
        bail!("faults need nodes to inject them into: name the nodes in a config file (--config, see docs/cluster.md)");
    }
    if budget.restarts > 0 && budget.crashes == 0 {
        bail!("a restart budget without crashes does nothing: add crash to --faults (or set crash in [faults])");
    }
    let check = options.check.map(shell).or_else(|| file.check.as_ref().map(Command::argv));
    let eventually = options.eventually.map(shell).or_else(|| file.eventually.as_ref().map(Command::argv));
    let spec = (!nodes.is_empty() || check.is_some() || eventually.is_some()).then(|| ClusterSpec { nodes, check, eventually, faults: budget });
    Ok(ClusterRun {
        spec,
        workload: file.workload.as_ref().map(Command::argv),
        setup: options.setup.map(str::to_string).or(file.setup),
        cleanup: options.cleanup.map(str::to_string).or(file.cleanup),
        pauses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn a_full_config_reads_as_documented() {
        let c = parse(
            r#"
            workload = "./workload.sh 3"
            check = ["./check", "--all"]
            setup = "rm -rf /tmp/kv"
            [[node]]
            name = "kv1"
            start = "./kv serve 7001"
            restart = ["./kv", "recover", "7001"]
            [[node]]
            name = "kv2"
            start = ["./kv", "serve", "7002"]
            [faults]
            crash = 2
            restart = 1
            skew = 1
            "#,
        )
        .unwrap();
        assert_eq!(c.workload.unwrap().argv(), shell("./workload.sh 3"));
        assert_eq!(c.check.unwrap().argv(), vec!["./check", "--all"]);
        assert_eq!(c.nodes.len(), 2);
        assert_eq!(c.nodes[0].restart.as_ref().unwrap().argv(), vec!["./kv", "recover", "7001"]);
        let b = c.faults.budget();
        assert_eq!((b.crashes, b.restarts, b.partitions, b.skews, b.skew_ms), (2, 1, 0, 1, DEFAULT_SKEW_MS));
    }

    #[test]
    fn a_misspelt_key_is_an_error() {
        let e = parse("[[node]]\nname = \"a\"\nstart = \"x\"\nrestrat = \"y\"\n").unwrap_err();
        assert!(e.to_string().contains("restrat"), "{e}");
    }

    #[test]
    fn fault_options_set_budgets() {
        let mut b = FaultBudget { crashes: 5, ..Default::default() };
        parse_faults("crash,restart:2, partition:0", &mut b).unwrap();
        assert_eq!((b.crashes, b.restarts, b.partitions), (1, 2, 0));
        assert!(parse_faults("crush", &mut b).unwrap_err().to_string().contains("unknown fault kind `crush`"));
        assert!(parse_faults("crash:x", &mut b).is_err());
        parse_faults("none", &mut b).unwrap();
        assert!(!b.any());
    }

    #[test]
    fn pauses_need_no_nodes_and_leave_the_node_budget_alone() {
        let run = resolve(&ClusterOptions { faults: Some("pause:3"), ..Default::default() }).unwrap();
        assert_eq!(run.pauses, 3);
        assert!(run.spec.is_none(), "a pause budget alone is no cluster");
        let mut b = FaultBudget::default();
        parse_faults("pause", &mut b).unwrap();
        assert_eq!(b.pauses, 1);
        assert!(!b.any(), "pauses are not node faults");
    }

    #[test]
    fn node_pauses_are_a_node_fault_of_their_own() {
        let c = parse("[[node]]\nname = \"a\"\nstart = \"x\"\n[faults]\npause-node = 2\npause = 1\n").unwrap();
        let b = c.faults.budget();
        assert_eq!((b.node_pauses, b.pauses), (2, 1));
        assert!(b.any(), "a node pause needs nodes");
        let mut b = FaultBudget::default();
        parse_faults("pause-node:3", &mut b).unwrap();
        assert_eq!((b.node_pauses, b.pauses), (3, 0));
        let options = ClusterOptions { faults: Some("pause-node"), ..Default::default() };
        assert!(resolve(&options).err().unwrap().to_string().contains("need nodes"));
    }

    #[test]
    fn faults_without_nodes_are_refused() {
        let options = ClusterOptions { faults: Some("crash"), ..Default::default() };
        assert!(resolve(&options).err().unwrap().to_string().contains("need nodes"));
        let check_only = resolve(&ClusterOptions { check: Some("./check.sh"), ..Default::default() }).unwrap();
        assert_eq!(check_only.spec.unwrap().check.unwrap(), shell("./check.sh"));
    }
}
