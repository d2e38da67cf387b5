//! Builds the built-in demo program (tests/fixtures/demo.c) that `dara-trace` runs when given no
//! command, and embeds it into the dara-trace binary.
use std::path::PathBuf;

fn main() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/demo.c");
    println!("cargo:rerun-if-changed={}", src.display());
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set by cargo")).join("dara-demo");
    let compiler = cc::Build::new().opt_level(1).debug(true).get_compiler();
    let status = compiler
        .to_command()
        .args(["-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running the C compiler for the demo fixture (install gcc or clang)");
    assert!(status.success(), "compiling {} failed", src.display());
}
