//! Environment variables kept out of a trace (`--env-exclude NAME`, globs like `AWS_*`): the
//! recording runs with their real values, the trace keeps each one's place in the environment
//! with an empty value and lists it as [`LeftOut`] with its length, and a replay takes the value
//! from the replaying user's environment.
//!
//! Why the place and the length: with ASLR off the environment's strings sit at the top of the
//! main thread's stack, so their total size moves every stack address below them. The same order
//! and the same lengths give the replay the same stack; a value of another length may make it
//! diverge (an object on the stack is then at another address), which [`check`] says up front.
use serde::{Deserialize, Serialize};

/// A variable whose value the trace does not hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    pub name: String,
    /// Length in bytes of the value the recording ran with.
    pub len: usize,
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters and `?` for one.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Classic greedy match with one backtrack point (the last `*`).
    let (mut pi, mut ni, mut star, mut resume) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            resume = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            resume += 1;
            ni = resume;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The environment as a trace records it: every variable some pattern matches keeps its place
/// with an empty value and is listed in the second vector.
pub fn redact(env: &[(String, String)], patterns: &[String]) -> (Vec<(String, String)>, Vec<LeftOut>) {
    let mut left_out = Vec::new();
    let recorded = env
        .iter()
        .map(|(name, value)| {
            if patterns.iter().any(|p| glob_matches(p, name)) {
                left_out.push(LeftOut { name: name.clone(), len: value.len() });
                (name.clone(), String::new())
            } else {
                (name.clone(), value.clone())
            }
        })
        .collect();
    (recorded, left_out)
}

/// The environment a replay runs with: the recorded one, with each left-out variable's value
/// from `lookup` (the replaying user's environment; empty when unset, see [`check`]).
pub fn restore(env: &[(String, String)], left_out: &[LeftOut], lookup: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    env.iter()
        .map(|(name, value)| match left_out.iter().any(|l| &l.name == name) {
            true => (name.clone(), lookup(name).unwrap_or_default()),
            false => (name.clone(), value.clone()),
        })
        .collect()
}

/// Whether a replay can take the left-out variables from `lookup`: Err names the unset ones
/// (the replay would not run the recorded program); Ok lists warnings for values whose length
/// differs from the recording's (the replay may diverge).
pub fn check(left_out: &[LeftOut], lookup: impl Fn(&str) -> Option<String>) -> Result<Vec<String>, String> {
    let missing: Vec<&str> = left_out.iter().filter(|l| lookup(&l.name).is_none()).map(|l| l.name.as_str()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "the trace was recorded without the value of {} (--env-exclude): set {} in the environment to replay it",
            missing.join(", "),
            if missing.len() == 1 { "it" } else { "them" }
        ));
    }
    Ok(left_out
        .iter()
        .filter_map(|l| {
            let len = lookup(&l.name)?.len();
            (len != l.len).then(|| format!("{} has {len} bytes here but had {} in the recording: stack addresses differ, so the replay may diverge", l.name, l.len))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_a_shell() {
        assert!(glob_matches("AWS_*", "AWS_SECRET_ACCESS_KEY"));
        assert!(glob_matches("AWS_*", "AWS_"));
        assert!(!glob_matches("AWS_*", "MY_AWS_KEY"));
        assert!(glob_matches("*TOKEN*", "GITHUB_TOKEN_2"));
        assert!(glob_matches("HOME", "HOME"));
        assert!(!glob_matches("HOME", "HOMEDIR"));
        assert!(glob_matches("A?C", "ABC"));
        assert!(!glob_matches("A?C", "AC"));
        assert!(glob_matches("*_KEY", "A_KEY_B_KEY"));
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn left_out_variables_keep_their_place_and_length_and_come_back_from_the_replayer() {
        let full = env(&[("PATH", "/bin"), ("AWS_KEY", "s3cr3t"), ("LANG", "C")]);
        let (recorded, left_out) = redact(&full, &["AWS_*".to_string()]);
        assert_eq!(recorded, env(&[("PATH", "/bin"), ("AWS_KEY", ""), ("LANG", "C")]));
        assert_eq!(left_out, vec![LeftOut { name: "AWS_KEY".into(), len: 6 }]);
        let same = |name: &str| (name == "AWS_KEY").then(|| "s3cr3t".to_string());
        assert_eq!(restore(&recorded, &left_out, same), full);
        assert_eq!(check(&left_out, same), Ok(vec![]));
        let unset = |_: &str| None;
        assert!(check(&left_out, unset).unwrap_err().contains("AWS_KEY"));
        let longer = |_: &str| Some("longer secret".to_string());
        assert_eq!(check(&left_out, longer).unwrap().len(), 1);
    }
}
