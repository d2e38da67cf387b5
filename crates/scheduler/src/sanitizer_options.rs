//! Sanitizer runtime options dara sets for every target (docs/sanitizers.md).
//!
//! AddressSanitizer, LeakSanitizer and UBSan read their options from `ASAN_OPTIONS`,
//! `LSAN_OPTIONS` and `UBSAN_OPTIONS`, colon-separated, the last setting of a flag winning. dara
//! puts its defaults *before* the user's value, so a user who sets a flag keeps it:
//!
//! * `verify_asan_link_order=0`: with the shared runtime (gcc's default, clang's
//!   `-shared-libasan`) libasan must come first in the initial library list, but dara's preload
//!   comes first; the preload defines no allocator, so ASan's interceptors still serve the program.
//! * `external_symbolizer_path=` (empty: no external symbolizer): clang's runtime starts
//!   `llvm-symbolizer` with a raw `fork` dara cannot follow, and talks to it with raw reads that
//!   would block while the token is held. gcc's runtime symbolizes in-process (libbacktrace) and
//!   is not affected; clang's reports show `(module+offset)` frames, which dara names itself
//!   (`crash_site`).
//! * `halt_on_error=1` for UBSan: its reports are otherwise printed and the program goes on to
//!   exit 0, which a search would not count as a bug.
//! * `GORACE=halt_on_error=1` for Go's race detector (`go build -race`, a TSan runtime whose flags
//!   are space-separated): the first `WARNING: DATA RACE` ends the program with status 66, so the
//!   run's bug is that race (`go_race`) and the rest of the execution is not spent. By default
//!   the program would go on and be reported by its last race.
use std::ffi::OsString;

/// (variable, dara's defaults, the separator of its flags) for each sanitizer runtime.
const DEFAULTS: [(&str, &str, &str); 4] = [
    ("ASAN_OPTIONS", "verify_asan_link_order=0:external_symbolizer_path=", ":"),
    ("LSAN_OPTIONS", "external_symbolizer_path=", ":"),
    ("UBSAN_OPTIONS", "halt_on_error=1:external_symbolizer_path=", ":"),
    ("GORACE", "halt_on_error=1", " "),
];

/// Puts dara's sanitizer defaults into `env`, ahead of any value the user gave.
pub fn apply(env: &mut Vec<(OsString, OsString)>) {
    for (name, defaults, separator) in DEFAULTS {
        match env.iter_mut().find(|(k, _)| k == name) {
            Some((_, value)) if !value.is_empty() => {
                let mut merged = OsString::from(defaults);
                merged.push(separator);
                merged.push(&*value);
                *value = merged;
            }
            Some((_, value)) => *value = defaults.into(),
            None => env.push((name.into(), defaults.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.to_str())
    }

    #[test]
    fn defaults_come_first_so_the_users_flags_win() {
        let mut env = vec![("ASAN_OPTIONS".into(), "detect_leaks=0".into()), ("PATH".into(), "/bin".into())];
        env.push(("GORACE".into(), "halt_on_error=0 log_path=/tmp/r".into()));
        apply(&mut env);
        assert_eq!(get(&env, "GORACE"), Some("halt_on_error=1 halt_on_error=0 log_path=/tmp/r"));
        assert_eq!(get(&env, "ASAN_OPTIONS"), Some("verify_asan_link_order=0:external_symbolizer_path=:detect_leaks=0"));
        assert_eq!(get(&env, "UBSAN_OPTIONS"), Some("halt_on_error=1:external_symbolizer_path="));
        assert_eq!(get(&env, "LSAN_OPTIONS"), Some("external_symbolizer_path="));
        assert_eq!(get(&env, "PATH"), Some("/bin"));
        assert_eq!(env.len(), 5);
    }
}
