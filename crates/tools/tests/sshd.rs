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
    let (last, port) = script_with_data_searched_clean_twice("sshd", "sshd_test.sh", SSHD_SEARCH_RUNS, "sshd_test: every answer was right");
    assert!(steps_with(&last, dara_abi::Op::NetAccept) >= 4, "sshd accepted every session under control");
    assert!(processes_with(&["sshd", &format!("Port {port}")]).is_empty() && processes_with(&["sshd-search-data"]).is_empty(), "an sshd survived");
}
