//! `libdara_cov.so`: the `__sanitizer_cov_*` callbacks a coverage-instrumented program links
//! against (DESIGN.md 2.4).
//!
//! A sancov build needs these symbols at link time: gcc's `-fsanitize-coverage=trace-pc` and
//! clang's `trace-loads`/`trace-stores` have no default implementation, and clang links weak
//! defaults *into the executable* for `trace-pc-guard`, which an LD_PRELOAD library could never
//! override. Linking `-ldara_cov` instead (clang: with `-fno-sanitize-link-runtime`) leaves the
//! symbols undefined in the executable and defined here, in a shared library. At run time the
//! dynamic loader binds them in scope order — the executable, then `LD_PRELOAD` libraries, then
//! the executable's own libraries — so under dara the preload's definitions win and every edge is
//! counted, while outside dara these cheap no-ops run and the program behaves as usual.
//!
//! Build lines (see docs/coverage.md):
//! * gcc:   `gcc -fsanitize-coverage=trace-pc prog.c -L<dir> -ldara_cov -Wl,-rpath,<dir>`
//! * clang: `clang -fsanitize-coverage=trace-pc-guard prog.c -fno-sanitize-link-runtime -L<dir> -ldara_cov`

/// gcc `trace-pc`: called at every edge.
#[no_mangle]
pub extern "C" fn __sanitizer_cov_trace_pc() {}

/// clang `trace-pc-guard`: called once per module with its guard array.
///
/// # Safety
/// Called by the instrumented module's constructor with a valid `[start, stop)` range.
#[no_mangle]
pub unsafe extern "C" fn __sanitizer_cov_trace_pc_guard_init(_start: *mut u32, _stop: *mut u32) {}

/// clang `trace-pc-guard`: called at every edge with that edge's guard.
///
/// # Safety
/// `guard` points into an array registered with `__sanitizer_cov_trace_pc_guard_init`.
#[no_mangle]
pub unsafe extern "C" fn __sanitizer_cov_trace_pc_guard(_guard: *mut u32) {}

macro_rules! access_callbacks {
    ($($name:ident),*) => {
        $(
            /// clang `trace-loads`/`trace-stores`: called before a memory access.
            #[no_mangle]
            pub extern "C" fn $name(_addr: *mut u8) {}
        )*
    };
}

access_callbacks!(
    __sanitizer_cov_load1,
    __sanitizer_cov_load2,
    __sanitizer_cov_load4,
    __sanitizer_cov_load8,
    __sanitizer_cov_load16,
    __sanitizer_cov_store1,
    __sanitizer_cov_store2,
    __sanitizer_cov_store4,
    __sanitizer_cov_store8,
    __sanitizer_cov_store16
);
