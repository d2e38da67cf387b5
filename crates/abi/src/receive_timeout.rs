//! A socket's receive timeout (`SO_RCVTIMEO`, a `struct timeval`) as the virtual deadline of a
//! blocking receive or accept, shared by the preload's hooks (crates/preload/src/hooks/net.rs) and
//! the ptrace agent (crates/tracer/src/ptrace/agent/net.rs): each reads the option its own way,
//! both turn it into the same deadline.

use crate::NO_DEADLINE;

/// The deadline (virtual ns) of a blocking receive started at `now_ns` on a socket whose
/// `SO_RCVTIMEO` is `tv_sec` s + `tv_usec` µs; `NO_DEADLINE` for a zero (unset) timeout, as the
/// kernel reads it.
pub fn deadline(now_ns: u64, tv_sec: i64, tv_usec: i64) -> u64 {
    if tv_sec <= 0 && tv_usec <= 0 {
        return NO_DEADLINE;
    }
    let ns = (tv_sec.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(tv_usec.max(0) as u64 * 1_000);
    now_ns.saturating_add(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_timeout_waits_forever_and_others_count_from_now() {
        assert_eq!(deadline(5, 0, 0), NO_DEADLINE);
        assert_eq!(deadline(5, 0, 100_000), 5 + 100_000_000);
        assert_eq!(deadline(5, 2, 1), 5 + 2_000_001_000);
        assert_eq!(deadline(u64::MAX - 1, 1, 0), u64::MAX);
    }
}
