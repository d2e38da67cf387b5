//! LEB128 varints and zigzag signed integers, as used by the step section of `trace.bin`.
//!
//! The decoder takes untrusted bytes, so it bounds itself: at most 10 bytes for a u64, no bits
//! beyond bit 63, and only the shortest encoding of each value. Rejecting overlong encodings makes
//! the step section canonical: a value has exactly one byte form, so two runs with equal steps
//! have equal [`decision_bytes`](super::decision_bytes).

/// The longest encoding of a u64 (7 bits per byte).
pub(crate) const MAX_LEN: usize = 10;

/// Why a varint could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VarintError {
    /// The input ended while the continuation bit was set (or was empty).
    Truncated,
    /// More than 64 bits of payload.
    Overflow,
    /// A longer encoding than needed (a trailing 0x00 continuation group).
    NonCanonical,
}

/// Appends `v` as an unsigned LEB128 varint.
pub(crate) fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an unsigned LEB128 varint from the start of `bytes`; returns the value and the number
/// of bytes it took.
pub(crate) fn get_u64(bytes: &[u8]) -> Result<(u64, usize), VarintError> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(MAX_LEN) {
        let payload = u64::from(b & 0x7f);
        // The tenth byte carries bit 63 only.
        if i == MAX_LEN - 1 && b > 1 {
            return Err(VarintError::Overflow);
        }
        value |= payload << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err(VarintError::NonCanonical);
            }
            return Ok((value, i + 1));
        }
    }
    if bytes.len() >= MAX_LEN {
        // Ten bytes, all with the continuation bit: already past 64 bits. (Unreachable through
        // the `b > 1` check above, kept so the loop's exit is obviously total.)
        Err(VarintError::Overflow)
    } else {
        Err(VarintError::Truncated)
    }
}

/// Maps signed to unsigned so small magnitudes of either sign stay short: 0, -1, 1, -2 → 0, 1, 2, 3.
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
pub(crate) fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_u64(&mut out, v);
        out
    }

    #[test]
    fn round_trips_edge_values() {
        for v in [
            0,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let b = enc(v);
            assert!(b.len() <= MAX_LEN);
            assert_eq!(get_u64(&b), Ok((v, b.len())));
            // Every proper prefix is truncated.
            for cut in 0..b.len() {
                assert_eq!(get_u64(&b[..cut]), Err(VarintError::Truncated));
            }
        }
        assert_eq!(enc(u64::MAX).len(), MAX_LEN);
    }

    #[test]
    fn rejects_overflow_and_overlong() {
        assert_eq!(get_u64(&[0xff; 11]), Err(VarintError::Overflow));
        let mut b = vec![0xff; 9];
        b.push(0x02);
        assert_eq!(get_u64(&b), Err(VarintError::Overflow));
        assert_eq!(get_u64(&[0x80, 0x00]), Err(VarintError::NonCanonical));
        assert_eq!(get_u64(&[0x81, 0x80, 0x00]), Err(VarintError::NonCanonical));
        assert_eq!(get_u64(&[0x00]), Ok((0, 1)));
    }

    #[test]
    fn zigzag_round_trips() {
        for v in [0i64, -1, 1, -2, 2, i64::MIN, i64::MAX, -110, 4096] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
        assert_eq!(zigzag(-2), 3);
    }
}
