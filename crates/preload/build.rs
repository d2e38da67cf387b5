//! Link flags of `libdara_preload.so`.
//!
//! `-z initfirst` (DF_1_INITFIRST): the dynamic loader runs this library's constructor before
//! every other library's. A new program image inherits the seccomp filter across `execve`, but
//! not the SIGSYS handler; a library constructor that ran first and made a trapped system call
//! (libgcrypt's or gnutls's `getrandom`, in postgres) would be killed by the kernel. Running first
//! also puts the other constructors after the start barrier, under control.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,initfirst");
}
