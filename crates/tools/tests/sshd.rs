//! Debian's OpenSSH server (docs/real-programs.md) in a closed-world test script
//! (tests/fixtures/scripts/sshd_test.sh: host and user keys made by ssh-keygen, sshd in the
//! foreground on a free loopback port, commands over ssh, a file copied in and back with scp and
//! the sftp server, SIGTERM), searched clean twice with the same decisions, the last execution
//! replayed. sshd's pre-authentication child sandboxes itself with a seccomp filter that allows
//! neither dara's trap handler's return nor its calls: dara refuses the filter as a kernel without
//! seccomp filters does (docs/limits.md), and sshd goes on without it. Before, every connection's
//! child was killed at its first trapped call, and dara blamed a blocked SIGSYS.
mod common;

use common::real::*;
use common::*;

/// Executions of each search: about 3,200 steps each (the keys, sshd, four sessions).
const SSHD_SEARCH_RUNS: u64 = 20;

#[test]
fn sshd_test_script_searches_clean_and_replays() {
    installed("ssh", "openssh-client");
    installed("ssh-keygen", "openssh-client");
    assert!(std::path::Path::new("/usr/sbin/sshd").is_file(), "/usr/sbin/sshd is not installed: run scripts/install-deps.sh (as root), which installs Debian's openssh-server");
    let script = repo_root().join("tests/fixtures/scripts/sshd_test.sh");
    let dir = out_dir("sshd-search-data").join("d");
    let setup = format!("rm -rf {d} && mkdir -p {d}", d = dir.display());
    let port = free_ports(1).to_string();
    let command = [script.to_str().unwrap(), dir.to_str().unwrap(), &port];
    let options = ["--setup", &setup, "--epoch", SEARCH_EPOCH];
    let (last, run) = search_clean("sshd-search", SSHD_SEARCH_RUNS, &options, &command);
    assert_eq!(run.stdout.matches("sshd_test: every answer was right").count() as u64, SSHD_SEARCH_RUNS, "{}", run.text());
    assert!(steps_with(&last, dara_abi::Op::NetAccept) >= 4, "sshd accepted every session under control");
    replays_identically(&last);
    let (again, _) = search_clean("sshd-search-again", SSHD_SEARCH_RUNS, &options, &command);
    same_decisions(&last, &again);
    assert!(processes_with(&["sshd", &format!("sshd-search-data")]).is_empty(), "an sshd survived");
}
