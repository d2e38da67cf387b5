//! Properties for dara, the same five as `sdk/c/dara.h`, for Rust programs:
//!
//! ```ignore
//! dara_sdk::always(balance >= 0, "no overdraft");        // holds at every evaluation
//! dara_sdk::sometimes(both_passed, "both passed");       // holds in some execution (a goal)
//! dara_sdk::reachable("a transfer refused");             // reached in some execution (a goal)
//! dara_sdk::unreachable("negative transfer");            // never reached
//! dara_sdk::eventually(total == 100, "money conserved"); // holds by the end of each execution
//! ```
//!
//! `name` names the property: a broken one is a bug with that name. Outside dara each call costs
//! a relaxed load and a branch (the descriptor is looked up once); under dara it writes one line
//! to the descriptor `DARA_SDK_FD` names (docs/properties.md). No dependencies, no allocation
//! after the first call, no lock: safe in any thread, and in a signal handler once looked up.
//! Unlike the C header, the crate cannot declare its properties before their first evaluation: a
//! goal that no execution reaches is not listed.
use std::io::Write;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicI32, Ordering};

/// -2: not looked up yet; -1: not under dara.
static FD: AtomicI32 = AtomicI32::new(-2);

fn fd() -> i32 {
    match FD.load(Ordering::Relaxed) {
        -2 => {
            let fd = std::env::var("DARA_SDK_FD").ok().and_then(|v| v.parse().ok()).unwrap_or(-1);
            FD.store(fd, Ordering::Relaxed);
            fd
        }
        fd => fd,
    }
}

/// Writes `KIND [HELD ]NAME\n` in one write (atomic for a pipe).
fn emit(kind: &str, held: Option<bool>, name: &str) {
    let fd = fd();
    if fd < 0 {
        return;
    }
    let mut line = [0u8; 1024];
    let mut cursor = std::io::Cursor::new(&mut line[..1023]);
    let held = match held {
        Some(true) => "1 ",
        Some(false) => "0 ",
        None => "",
    };
    let _ = write!(cursor, "{kind} {held}{name}");
    let n = cursor.position() as usize;
    line[n] = b'\n';
    // SAFETY: dara keeps the descriptor open for the life of the process; ManuallyDrop leaves it
    // open after this write.
    let mut out = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    let _ = out.write(&line[..=n]);
}

/// The condition holds at every evaluation; one that is false is a bug named `name`.
pub fn always(cond: bool, name: &str) {
    if fd() >= 0 {
        emit("always", Some(cond), name);
    }
}

/// The condition holds at some evaluation of some execution (a goal the search reports).
pub fn sometimes(cond: bool, name: &str) {
    if fd() >= 0 {
        emit("sometimes", Some(cond), name);
    }
}

/// This point is reached in some execution (a goal the search reports).
pub fn reachable(name: &str) {
    if fd() >= 0 {
        emit("reachable", None, name);
    }
}

/// This point is never reached; reaching it is a bug named `name`.
pub fn unreachable(name: &str) {
    if fd() >= 0 {
        emit("unreachable", None, name);
    }
}

/// The condition holds at some evaluation of each execution, by its end; one in which it never
/// held is a bug named `name`.
pub fn eventually(cond: bool, name: &str) {
    if fd() >= 0 {
        emit("eventually", Some(cond), name);
    }
}
