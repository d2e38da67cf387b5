//! The strategies' own pseudo-random generator: xoshiro256** (Blackman & Vigna, "Scrambled
//! Linear Pseudorandom Number Generators", 2021), seeded through [`dara_abi::splitmix64`].
//!
//! Small, fast, and above all stable: a trace names a strategy, a seed and an execution index,
//! and the same triple must give the same schedule in every future build, so this generator
//! (like the seeding rule in [`Rng::for_execution`]) is part of dara's on-disk contract and must
//! not change silently. It is unrelated to the application's random streams, which are seeded
//! separately so the program's own draws never perturb the schedule.
use dara_abi::splitmix64;

/// xoshiro256**. Never all-zero (seeding guarantees it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

/// Splitmix64's increment: consecutive seeding inputs are `seed + i * GOLDEN`.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

impl Rng {
    /// A generator whose whole state is derived from `seed` by the splitmix64 stream, as the
    /// xoshiro authors recommend.
    pub fn new(seed: u64) -> Rng {
        let mut s = [0u64; 4];
        for (i, word) in s.iter_mut().enumerate() {
            *word = splitmix64(seed.wrapping_add(GOLDEN.wrapping_mul(i as u64)));
        }
        if s == [0; 4] {
            s[0] = GOLDEN; // unreachable in practice; xoshiro must not start at zero
        }
        Rng { s }
    }

    /// The generator of execution `execution` of a search seeded with `seed`. Depends on nothing
    /// else, so any single execution can be re-run on its own.
    pub fn for_execution(seed: u64, execution: u64) -> Rng {
        Rng::new(splitmix64(seed ^ splitmix64(execution)))
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` without modulo bias (Lemire's multiply-and-reject). `n == 0` gives 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n; // 2^64 mod n
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Uniform index into a slice of `len` elements (`len == 0` gives 0).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// Uniform in `lo..=hi` (`hi < lo` gives `lo`).
    pub fn in_range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.next_u64(), // the full u64 range
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_output() {
        // xoshiro256** from the state {1, 2, 3, 4}: first outputs of the reference C code.
        let mut r = Rng { s: [1, 2, 3, 4] };
        let got: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
        assert_eq!(got, [11520, 0, 1509978240, 1215971899390074240]);
    }

    #[test]
    fn seeding_is_deterministic_and_spreads() {
        assert_eq!(Rng::new(42), Rng::new(42));
        assert_ne!(Rng::new(42), Rng::new(43));
        assert_eq!(Rng::for_execution(1, 7), Rng::for_execution(1, 7));
        assert_ne!(Rng::for_execution(1, 7), Rng::for_execution(1, 8));
        assert_ne!(Rng::for_execution(1, 7), Rng::for_execution(2, 7));
    }

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut r = Rng::new(9);
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            let v = r.below(6);
            counts[v as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below(1), 0);
        assert_eq!(r.in_range(5, 5), 5);
        for _ in 0..100 {
            assert!((3..=9).contains(&r.in_range(3, 9)));
        }
        let _ = r.in_range(0, u64::MAX);
    }
}
