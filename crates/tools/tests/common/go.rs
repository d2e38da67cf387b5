//! Builds the Go fixtures (tests/fixtures/go/NAME/, one `main` package per directory of one
//! module without requirements) with Debian's golang-go, the way `fixture_built_by` builds the C
//! ones: once per test binary, again when a source is newer than the executable, into a private
//! temporary name renamed into place (two test binaries may build the same fixture at once).
//!
//! Nothing is downloaded (`GOPROXY=off`, `GOFLAGS=-mod=mod` on a module with no requirements) and
//! nothing is written to $HOME: the build and module caches live under `CARGO_TARGET_TMPDIR/go`
//! and the user's go env file is ignored (`GOENV=off`). Builds use `-trimpath` and no VCS stamp.
//! The first build of a configuration compiles the standard library into that cache: all of
//! go_fixtures.rs took 22 s with an empty cache on the 2-core VM (at load 2), 0.5 s after.
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{installed, repo_root, BUILD_LOCK};

/// Whether a Go build links runtime/cgo (`CGO_ENABLED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cgo {
    /// `CGO_ENABLED=0`: pure Go, the net package included; a static binary with no PT_INTERP.
    Off,
    /// `CGO_ENABLED=1`: every fixture links runtime/cgo (package variant's cgo.go), so it is a
    /// dynamically linked program started by ld.so whose threads come from pthread_create.
    On,
}

/// A buggy Go fixture: how its bug shows and how its correct twin (`-tags=ok`) ends, for the
/// native checks (go_fixtures.rs) and the searches under dara.
#[derive(Clone, Copy, Debug)]
pub struct GoBug {
    /// The directory under tests/fixtures/go.
    pub name: &'static str,
    /// What the program prints (stdout or stderr) when the bug shows.
    pub prints: &'static str,
    /// Its exit status then.
    pub status: i32,
    /// What the twin prints on stdout (it exits 0).
    pub twin_prints: &'static str,
}

pub const LOOPVAR: GoBug = GoBug { name: "loopvar", prints: "loopvar: lost jobs", status: 1, twin_prints: "loopvar: 4 jobs handled once each" };
pub const PRODCONS: GoBug = GoBug { name: "prodcons", prints: "panic: send on closed channel", status: 2, twin_prints: "prodcons: 3 producers, 15 items" };
pub const PHILOSOPHERS: GoBug = GoBug {
    name: "philosophers",
    prints: "fatal error: all goroutines are asleep - deadlock!",
    status: 2,
    twin_prints: "philosophers: 5 philosophers ate [3 3 3 3 3] meals",
};
pub const MAPWRITES: GoBug = GoBug { name: "mapwrites", prints: "fatal error: concurrent map writes", status: 2, twin_prints: "mapwrites: 800 entries" };
/// Run through tests/fixtures/scripts/go_kv_test.sh KV PRIMARY_PORT BACKUP_PORT (the client's
/// verdict is the script's).
pub const KV: GoBug = GoBug { name: "kv", prints: "client: stale read", status: 1, twin_prints: "client: read x=1 from the backup" };
/// Every buggy Go fixture.
pub const GO_BUGS: [GoBug; 5] = [LOOPVAR, PRODCONS, PHILOSOPHERS, MAPWRITES, KV];

/// The Go fixture tests/fixtures/go/NAME built as a static binary (its buggy version).
pub fn go_fixture(name: &str) -> PathBuf {
    go_fixture_with(name, &[])
}

/// The correct twin of the Go fixture NAME: the same directory built with `-tags=ok`.
pub fn go_twin(name: &str) -> PathBuf {
    go_fixture_with(name, &["-tags=ok"])
}

/// Like [`go_fixture`], with extra `go build` flags (part of the cache key). `-race` builds link
/// runtime/cgo: Go 1.19's race detector needs cgo on linux/amd64.
pub fn go_fixture_with(name: &str, flags: &[&str]) -> PathBuf {
    let cgo = if flags.contains(&"-race") { Cgo::On } else { Cgo::Off };
    go_fixture_linked(name, cgo, flags)
}

/// The Go fixture NAME built with `cgo` and extra `go build` flags.
pub fn go_fixture_linked(name: &str, cgo: Cgo, flags: &[&str]) -> PathBuf {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let module = repo_root().join("tests/fixtures/go");
    let package = module.join(name);
    assert!(package.join("main.go").is_file(), "no Go fixture {name}: expected {}", package.join("main.go").display());
    let go = installed("go", "golang-go");
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("go");
    let dir = cache.join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let mut key: Vec<String> = flags.iter().map(|f| f.trim_start_matches('-').replace(['/', '='], "_")).collect();
    if cgo == Cgo::On {
        key.insert(0, "cgo".into());
    }
    let exe = dir.join(if key.is_empty() { name.to_string() } else { format!("{name}.{}", key.join("_")) });
    // The fixture's own directory, the shared package, go.mod and dara's Go SDK: what the build reads.
    let sources = [package.clone(), module.join("variant"), module.join("go.mod"), repo_root().join("sdk/go")];
    let fresh = exe.metadata().and_then(|m| m.modified()).ok() > sources.iter().filter_map(|s| newest_in(s)).max();
    if !fresh {
        let tmp = exe.with_extension(format!("tmp{}", std::process::id()));
        let output = Command::new(&go)
            .current_dir(&module)
            .env("CGO_ENABLED", if cgo == Cgo::On { "1" } else { "0" })
            .env("GOFLAGS", "-mod=mod")
            .env("GOPROXY", "off")
            .env("GOENV", "off")
            .env("GOCACHE", cache.join("cache"))
            .env("GOPATH", cache.join("path"))
            .args(["build", "-trimpath", "-buildvcs=false"])
            .args(flags)
            .arg("-o")
            .arg(&tmp)
            .arg(format!("./{name}"))
            .output()
            .expect("running go build");
        assert!(output.status.success(), "go build of tests/fixtures/go/{name} ({cgo:?}, {flags:?}) failed:\n{}", String::from_utf8_lossy(&output.stderr));
        std::fs::rename(&tmp, &exe).unwrap();
    }
    exe
}

/// Modification time of `path`, or of the newest file under it when it is a directory.
fn newest_in(path: &Path) -> Option<std::time::SystemTime> {
    let own = path.metadata().and_then(|m| m.modified()).ok();
    let inner = std::fs::read_dir(path).into_iter().flatten().flatten().filter_map(|e| newest_in(&e.path()));
    own.into_iter().chain(inner).max()
}

/// Whether the ELF file at `path` names a program interpreter (PT_INTERP): dynamically linked.
pub fn has_interpreter(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let elf = goblin::elf::Elf::parse(&bytes).unwrap_or_else(|e| panic!("{} is not an ELF file: {e}", path.display()));
    elf.interpreter.is_some()
}
