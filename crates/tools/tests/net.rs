//! Loopback networking under dara (docs/networking.md): the message-order and timeout fixtures'
//! bugs are found within a stated number of runs (strategy, seed), replay 20/20, `--verify` holds,
//! the same seed gives identical decisions; their twins and the non-bug fixtures (non-blocking
//! connect + poll, UDP ping-pong, a datagram to a port nobody has bound yet, UDP datagrams a
//! full receive buffer drops, a pipe, blocking
//! recv/epoll on a socketpair and eventfd, requests sent in several writes, a writer far ahead of
//! a reader whose window its own unread bytes hold shut, batches of datagrams
//! through sendmmsg and recvmmsg, hooked or raw) run clean, replay, show their network steps in the
//! listing, and leave no process behind.
mod common;

use std::time::Duration;

use common::*;

fn finds_and_replays(name: &str, shows: &str, strategy: &str, seed: u64, runs: u64) {
    finds_and_replays_with(name, shows, strategy, seed, runs, &[]);
}

fn finds_and_replays_with(name: &str, shows: &str, strategy: &str, seed: u64, runs: u64, options: &[&str]) {
    let tag = format!("{name}-{}", strategy.replace(':', ""));
    let program = private_copy(&fixture(name), &tag);
    let out = out_dir(&tag);
    let run = search_with(&out, strategy, seed, runs, &program, options);
    assert_eq!(run.code, 1, "{name}: expected a bug within {runs} {strategy} executions (seed {seed})\n{}", run.text());
    assert!(run.stderr.contains(shows), "{name}: expected {shows:?}\n{}", run.text());
    let bug = out.join("bug-0001/trace.bin");
    replays(&bug, shows);
    let again = out_dir(&format!("{tag}-again"));
    let run2 = search_with(&again, strategy, seed, runs, &program, options);
    assert_eq!(run2.code, 1, "{name}: the same seed did not find the bug again\n{}", run2.text());
    same_decisions(&bug, &again.join("bug-0001/trace.bin"));
    assert_no_survivors(&program);
}

/// Clean over `runs` executions of pct:3 and random; the last one replays clean and verifies,
/// the same seed twice gives identical decisions, and the listing shows each of `listing`.
fn stays_clean(name: &str, runs: u64, listing: &[&str]) {
    stays_clean_built(&fixture(name), name, runs, listing);
}

/// [`stays_clean`] for `built`, a build of fixture `name` (static, say) named `name` in the
/// output directories.
fn stays_clean_built(built: &std::path::Path, name: &str, runs: u64, listing: &[&str]) {
    let program = private_copy(built, name);
    for (strategy, seed) in [("pct:3", 11u64), ("random", 12)] {
        let tag = format!("{name}-{}", strategy.replace(':', ""));
        let out = out_dir(&tag);
        let run = search(&out, strategy, seed, runs, &program);
        assert_eq!(run.code, 0, "{name}: reported a bug under {strategy}\n{}", run.text());
        assert!(run.stderr.contains(&format!("no bug found in {runs} executions")), "{}", run.text());
        let last = out.join("trace.bin");
        let verify = dara_replay(&["--verify", last.to_str().unwrap()], Duration::from_secs(60));
        assert_eq!(verify.code, 0, "{name}: clean run did not replay clean\n{}", verify.text());
        assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
        for needle in listing {
            assert!(verify.stdout.contains(needle), "{name}: listing lacks {needle:?}\n{}", verify.stdout);
        }
        let again = out_dir(&format!("{tag}-again"));
        let run2 = search(&again, strategy, seed, runs, &program);
        assert_eq!(run2.code, 0, "{}", run2.text());
        same_decisions(&last, &again.join("trace.bin"));
    }
    assert_no_survivors(&program);
}

#[test]
fn net_order_pct() {
    finds_and_replays("net_order", "Assertion `strcmp(reply, \"OK\") == 0' failed", "pct:3", 1, 300);
}

#[test]
fn net_order_random() {
    finds_and_replays("net_order", "Assertion `strcmp(reply, \"OK\") == 0' failed", "random", 1, 100);
}

// The timeout fires while the answer is on its way only if the server is slow: a pause fault.
// (Without one, timers fire at their deadlines and the 100 ms poll never times out:
// timers.rs checks that no such program is reported by default.)
#[test]
fn net_timeout_pct() {
    finds_and_replays_with("net_timeout", "Assertion `done == applied' failed", "pct:3", 1, 300, &["--faults", "pause"]);
}

#[test]
fn net_timeout_random() {
    finds_and_replays_with("net_timeout", "Assertion `done == applied' failed", "random", 1, 100, &["--faults", "pause"]);
}

#[test]
fn net_order_ok() {
    stays_clean("net_order_ok", 300, &["accept ", "poll ", "send             tcp e", "\"DEP\""]);
}

#[test]
fn net_timeout_ok() {
    stays_clean("net_timeout_ok", 300, &["recv             unix e"]);
}

#[test]
fn net_timeout_ok_with_pauses() {
    // The twin waits on after a timeout: even when a pause makes the poll time out, it is right.
    let program = private_copy(&fixture("net_timeout_ok"), "net_timeout_ok_paused");
    let out = out_dir("net_timeout_ok_paused");
    let run = search_with(&out, "random", 5, 200, &program, &["--faults", "pause"]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains("no bug found in 200 executions"), "{}", run.text());
}

#[test]
fn net_nbconnect() {
    stays_clean("net_nbconnect", 100, &["connect", "\"ping\"", "\"pong\""]);
}

/// A non-blocking connect whose SYN a full listener dropped completes with the kernel's
/// retransmission once an accept made room (dara waits for it, in real time, at that quiet point;
/// about a second per execution, hence few executions).
#[test]
fn net_nbconnect_backlog() {
    stays_clean("net_nbconnect_backlog", 3, &["connect", "nonblocking connect: EINPROGRESS, connected once there was room"]);
}

/// Reads of a socket's error queue (`MSG_ERRQUEUE`, as socat makes after a failed connect) never
/// block: the kernel's EAGAIN reaches the program at once, on a blocking TCP socket whose connect
/// was refused and on a UDP socket. Before, the preload waited that EAGAIN out as a blocking
/// receive's: socat's child posted receives until "hang: step bound reached".
#[test]
fn net_errqueue() {
    stays_clean("net_errqueue", 10, &["connect", "recv "]);
}

/// A loopback transfer of 200 KB in 64 KiB writes read 8 KiB at a time (a relay's page, as socat
/// and squid pass it on): the reader's receive memory fills with segments charged whole until
/// read, its window closes before the queue holds what dara grants a receive, and only the
/// receive's own read lets the rest in (`net_window_held`'s case). Before, every search stopped as
/// "uncontrolled: ... did not arrive within 2000 ms"; the receive now takes its whole grant.
#[test]
fn net_full_rcvmem() {
    stays_clean("net_full_rcvmem", 10, &["recv "]);
}

/// squid and its pinger: two UDP sockets bound to loopback port 0 and connected to each other
/// across a fork (IPv6 as squid, and IPv4). A recording splits both bound sockets; the greeting
/// reaches the parent's twin, connected to the child's public address, from that address (before:
/// from a socket of dara's own, which the connected twin dropped, and the recording stopped with
/// "loopback delivery ... did not arrive within 2000 ms"). It replays with `--verify`; a search,
/// which splits nothing, stays clean.
#[test]
fn net_udp_connected_pair() {
    let program = private_copy(&fixture("net_udp_connected_pair"), "net_udp_connected_pair");
    for family in ["6", "4"] {
        let out = out_dir(&format!("net_udp_connected_pair-{family}"));
        let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap(), family], Duration::from_secs(60));
        assert_eq!(run.code, 0, "IPv{family}: {}", run.text());
        assert!(run.stdout.contains("got 10 hi there"), "IPv{family}: {}", run.text());
        let verify = dara_replay(&["--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
        assert!(verify.code == 0 && verify.stdout.contains("verify: 2 more executions identical"), "IPv{family}: {}", verify.text());
    }
    stays_clean("net_udp_connected_pair", 10, &["recv "]);
}

#[test]
fn net_udp() {
    stays_clean("net_udp", 100, &["send             udp e", "\"one.", "\"two."]);
}

/// Batches of datagrams (`sendmmsg`, `recvmmsg` with and without `MSG_WAITFORONE`, as libuv
/// uses them): each message is a step of its own, so batches interleave.
#[test]
fn net_udp_batches() {
    stays_clean("net_udp_batches", 30, &["send             udp e1 \"m0\"", "recv             udp e0 \"m5\"", "\"n1\"", "then 2: n0 n1"]);
}

/// The same batches made with raw system calls (`syscall(SYS_recvmmsg, ...)`, `syscall(SYS_sendmmsg,
/// ...)`, as libuv 1.44 in BIND's named does): the syscall trap makes each message a step, so the
/// echo server's receives and sends are in the listing and every execution is clean. Before the
/// trap caught them, both searches stopped at execution 0, "uncontrolled: thread 1 epoll-wait:
/// loopback delivery to endpoint e0 did not arrive" (the requests the server took raw were still
/// owed to it in the model).
#[test]
fn net_udp_raw_batches() {
    stays_clean("net_udp_raw_batches", 30, &["t1           recv             udp e", "t1           send             udp e", "\"q3\"", "answers: q0 q1 q2 q3"]);
}

/// A datagram to a port nobody has bound is lost, not owed: the socket bound there afterwards
/// times out at once instead of dara waiting for a delivery that never comes.
#[test]
fn net_udp_unbound() {
    stays_clean("net_udp_unbound", 50, &["send             udp e1<->e0 \"lost\"", "poll (timeout)", "\"kept\""]);
}

/// Datagrams the kernel drops (sent before anyone bound the port; beyond a full receive buffer)
/// are not owed to the port: the server times out on nothing instead of stalling the run.
#[test]
fn net_udp_drops() {
    stays_clean("net_udp_drops", 100, &["poll (timeout)", "\"burs"]);
}

#[test]
fn net_pipe() {
    stays_clean("net_pipe", 100, &["pipe e", "\"rec!\""]);
}

/// A request sent in three writes reaches the server's receives as the schedule says, not as
/// the kernel's delayed-ACK timer does (Nagle's algorithm holds the second write back): every
/// execution clean, the same seed the same decisions, replays exact. Before dara pushed held-back
/// bytes, random seed 5 stopped at execution 0 with a false deadlock.
#[test]
fn net_split_send_tcp() {
    stays_clean("net_split_send", 50, &["recv             tcp e", "\"key1\""]);
}

/// A blocking writer of 300,000 bytes to a reader whose receive buffer is 2 KiB: each receive is
/// granted what fits that window (a quarter of the buffer), so every execution ends clean instead
/// of waiting for bytes the window cannot hold; the same seed gives the same decisions.
#[test]
fn net_small_rcvbuf() {
    stays_clean("net_small_rcvbuf", 5, &["recv             tcp e", "received 300000"]);
}

/// A writer far ahead of a reader that reads odd pieces (tests/fixtures/net_window_held.c): a
/// segment the reader has mostly read holds its window shut, so the rest of a receive's grant
/// comes only after the receive's own read. Every execution ends clean (before: stopped as
/// uncontrolled, "did not arrive within 2000 ms", in the first), replays with `--verify`, the
/// same seed gives the same decisions, the static build too (the ptrace agent takes the grant
/// for it), and a recording replays as well.
#[test]
fn net_window_held() {
    stays_clean("net_window_held", 5, &["recv             tcp e", "received 2000000"]);
    stays_clean_built(&fixture_with("net_window_held", &["-static"]), "net_window_held-static", 5, &["recv             tcp e", "received 2000000"]);
    let program = private_copy(&fixture("net_window_held"), "net_window_held-recorded");
    let out = out_dir("net_window_held-recorded");
    let run = dara_trace(&["-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 0, "the recording did not end clean\n{}", run.text());
    assert!(run.text().contains("received 2000000"), "{}", run.text());
    let verify = dara_replay(&["--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(verify.code, 0, "the recording did not replay clean\n{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert_no_survivors(&program);
}

/// A listener with `TCP_DEFER_ACCEPT` (tests/fixtures/net_defer_accept.c, as Apache sets it):
/// clients that connect and send only after a sleep are accepted, through `poll` and a blocking
/// `accept`, and answered. Before, dara waited for the first connection to show in the listener's
/// queue while its client was parked before the bytes that would queue it, and every execution
/// stopped as uncontrolled after 2 s. The preload takes the option off (`hooks/sockopt.rs`); the
/// static build goes through the ptrace agent, where the scheduler takes it off when the
/// connection does not show (the kernel then answers the handshake again, a second later).
#[test]
fn net_defer_accept() {
    stays_clean("net_defer_accept", 3, &["accept           tcp e", "defer_accept: 2 pongs"]);
    let program = private_copy(&fixture_with("net_defer_accept", &["-static", "-pthread"]), "net_defer_accept_static");
    let out = out_dir("net_defer_accept_static");
    let run = search(&out, "random", 3, 2, &program);
    assert_eq!(run.code, 0, "{}", run.text());
    assert_eq!(run.stdout.matches("defer_accept: 2 pongs").count(), 2, "{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(60));
    assert!(verify.code == 0 && verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert_no_survivors(&program);
}

/// Two server threads with a UDP socket and a TCP listener each on one port (SO_REUSEPORT;
/// tests/fixtures/net_reuseport.c, as unbound's threads): every query and connection is answered,
/// the same seed gives the same decisions (the group's first socket takes everything: which one
/// the kernel picks otherwise follows the client's random port). Before, dara waited for the first
/// datagram on the socket that did not get it and stopped the run after 2 s.
#[test]
fn net_reuseport() {
    stays_clean("net_reuseport", 5, &["reuseport: 3 datagrams and 3 connections answered"]);
}

/// The same over a Unix-domain socketpair, which delivers inside each write.
#[test]
fn net_split_send_unix() {
    split_send_variant("unix", "recv             unix e");
}

/// The same with each part written as bash's `printf ... >&3` does: descriptor 1 pointed at the
/// socket, the part written through stdio (a write inside libc the syscall trap catches),
/// descriptor 1 pointed back at stdout before the next scheduling point.
#[test]
fn net_split_send_through_stdio() {
    split_send_variant("stdio", "send             tcp e");
}

/// `net_split_send VARIANT`: 50 random executions (seed 5) clean, twice with the same decisions;
/// the last replays with `--verify` and its listing shows `listing`.
fn split_send_variant(variant: &str, listing: &str) {
    let tag = format!("net_split_send_{variant}");
    let program = private_copy(&fixture("net_split_send"), &tag);
    let search = |tag: &str| {
        let out = out_dir(tag);
        let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--strategy", "random", "--seed", "5", "--runs", "50", "--", program.to_str().unwrap(), variant], Duration::from_secs(300));
        assert_eq!(run.code, 0, "{}", run.text());
        assert!(run.stderr.contains("no bug found in 50 executions"), "{}", run.text());
        out.join("trace.bin")
    };
    let (first, second) = (search(&tag), search(&format!("{tag}-again")));
    same_decisions(&first, &second);
    let verify = dara_replay(&["--verify", first.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(verify.code, 0, "{}", verify.text());
    assert!(verify.stdout.contains("verify: 2 more executions identical"), "{}", verify.text());
    assert!(verify.stdout.contains(listing), "{}", verify.stdout);
    assert_no_survivors(&program);
}

#[test]
fn net_blocking_recv() {
    stays_clean("net_blocking_recv", 100, &["epoll-wait", "eventfd e", "\"hell\""]);
}

/// A blocking recv nobody will ever answer is a deadlock naming the endpoint, never a hang or an
/// "uncontrolled blocking" stop.
#[test]
fn recv_without_sender_is_a_deadlock() {
    let src = std::env::temp_dir().join("dara-net-lonely.c");
    std::fs::write(&src, "#include <sys/socket.h>\nint main(void){int sv[2];char c;socketpair(AF_UNIX,SOCK_STREAM,0,sv);return recv(sv[0],&c,1,0);}\n").unwrap();
    let bin = std::env::temp_dir().join("dara-net-lonely");
    assert!(std::process::Command::new("cc").arg("-o").arg(&bin).arg(&src).status().unwrap().success());
    let out = out_dir("net-lonely");
    let run = search(&out, "random", 1, 1, &bin);
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains("deadlock"), "{}", run.text());
    assert!(run.stderr.contains("waits for data on endpoint e0"), "{}", run.text());
}
