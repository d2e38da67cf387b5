//! What an `execve` is about to run, read from the file's ELF headers before the exec: a program
//! the preload can enter, or one dara runs through its ptrace agent instead (see
//! crates/tracer/src/ptrace and `dara_tracer::binary::needs_agent`, the launcher's twin of this
//! check):
//!
//! * **statically linked** (no `PT_INTERP`): no dynamic loader would load the preload;
//! * **Go** (a `Go` build-id note, which Go's linker writes into every program it links): even
//!   when linked against libc (cgo) and so loaded with the preload, Go's runtime makes its own
//!   system calls, keeps goroutines off libc's locks and reads the clock and CPU set by raw
//!   calls, and the preload's hooks would leave it uncontrolled;
//! * **a secure exec**: a set-user-ID or set-group-ID program of another owner, or one with file
//!   capabilities run by anyone but root (`ping`, squid's `pinger` when squid runs as `proxy`).
//!   The kernel starts it with `AT_SECURE`, and the dynamic loader ignores `LD_PRELOAD`: the
//!   image would run dara's seccomp filter without the handler its trap needs, and die of SIGSYS
//!   at its first trapped call. (dara's `no_new_privs` keeps it from gaining the privileges; the
//!   kernel still marks it secure.)
//!
//! The exec of any of these drops dara's library from `LD_PRELOAD`: the agent alone controls the new
//! image and whatever it execs in turn (a dynamically linked program started by a static or Go
//! one runs through the agent too).
//!
//! Runs in the SIGSYS handler: raw syscalls (`open`, `pread64`), stack buffers, no allocation.
use libc::c_char;

use crate::sys;

/// Who runs the image an exec is about to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecImage {
    /// A dynamically linked program (or anything unreadable or not ELF, left to the kernel): the
    /// preload enters it.
    Preload,
    /// A statically linked program: the agent.
    Static,
    /// A dynamically linked Go program: the agent, loaded without dara's preload.
    GoDynamic,
    /// A dynamically linked program the kernel starts as a secure exec: the agent.
    SecureExec,
}

impl ExecImage {
    pub fn via_agent(self) -> bool {
        self != ExecImage::Preload
    }
}

/// Program headers looked at, at most.
const MAX_PROGRAM_HEADERS: u64 = 64;
/// Bytes of a note segment read, at most (Go's note follows the GNU ones: about 170 bytes in).
const NOTE_BYTES: usize = 512;
/// `n_type` of Go's build-id note (name "Go").
const GO_BUILD_ID_NOTE: u32 = 4;

/// Classifies the file at `path`.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub unsafe fn classify(path: *const c_char) -> ExecImage {
    if path.is_null() {
        return ExecImage::Preload;
    }
    // SAFETY: opening a path the program named, read-only.
    let fd = unsafe { sys::syscall(libc::SYS_open, &[path as u64, (libc::O_RDONLY | libc::O_CLOEXEC) as u64]) };
    if fd < 0 {
        return ExecImage::Preload;
    }
    let kind = classify_open(fd as i32);
    sys::close(fd as i32);
    kind
}

fn classify_open(fd: i32) -> ExecImage {
    let mut head = [0u8; 64];
    if pread(fd, &mut head, 0) != 64 || head[..4] != *b"\x7fELF" || head[4] != 2 {
        return ExecImage::Preload;
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]) as u64;
    let phoff = u64::from_le_bytes(head[32..40].try_into().unwrap_or([0; 8]));
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    let (mut has_interp, mut go) = (false, false);
    // p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz.
    let mut ph = [0u8; 40];
    for i in 0..phnum.min(MAX_PROGRAM_HEADERS) {
        if pread(fd, &mut ph, phoff + i * phentsize) != ph.len() as i64 {
            continue;
        }
        let p_type = u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]);
        let offset = u64::from_le_bytes(ph[8..16].try_into().unwrap_or([0; 8]));
        let size = u64::from_le_bytes(ph[32..40].try_into().unwrap_or([0; 8]));
        match p_type {
            libc::PT_INTERP => has_interp = true,
            libc::PT_NOTE if !go => go = has_go_note(fd, offset, size),
            _ => {}
        }
    }
    match (has_interp, go) {
        // ET_EXEC or ET_DYN without PT_INTERP: nothing would load the preload.
        (false, _) if phnum > 0 => ExecImage::Static,
        (true, true) => ExecImage::GoDynamic,
        (true, false) if secure_exec(fd) => ExecImage::SecureExec,
        _ => ExecImage::Preload,
    }
}

/// Whether the kernel would run the open program `fd` with `AT_SECURE` for this process: its
/// set-user-ID bit with an owner other than the effective user, its set-group-ID bit with a group
/// other than the effective group, or file capabilities for a process whose real user is not root
/// (the kernel's `cap_bprm_creds_from_file`; supplementary groups are not looked at, so a
/// set-group-ID program of one of them also goes to the agent, which runs it all the same).
fn secure_exec(fd: i32) -> bool {
    // SAFETY: all-zero is a valid `stat`; fstat fills it.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fstat writes one `stat` into the live local.
    if unsafe { sys::syscall(libc::SYS_fstat, &[fd as u64, &mut st as *mut libc::stat as u64]) } != 0 {
        return false;
    }
    // SAFETY: the id calls take no arguments.
    let (uid, euid, egid) = unsafe { (sys::syscall(libc::SYS_getuid, &[]), sys::syscall(libc::SYS_geteuid, &[]), sys::syscall(libc::SYS_getegid, &[])) };
    let set_uid = st.st_mode & libc::S_ISUID != 0 && i64::from(st.st_uid) != euid;
    let set_gid = st.st_mode & libc::S_ISGID != 0 && st.st_mode & libc::S_IXGRP != 0 && i64::from(st.st_gid) != egid;
    // SAFETY: a null buffer of size 0 only asks for the attribute's size.
    let capabilities = uid != 0 && unsafe { sys::syscall(libc::SYS_fgetxattr, &[fd as u64, c"security.capability".as_ptr() as u64, 0, 0]) } >= 0;
    set_uid || set_gid || capabilities
}

/// Whether the note segment at `offset` (`size` bytes) holds Go's build-id note.
fn has_go_note(fd: i32, offset: u64, size: u64) -> bool {
    let mut notes = [0u8; NOTE_BYTES];
    let len = (size as usize).min(NOTE_BYTES);
    if pread(fd, &mut notes[..len], offset) != len as i64 {
        return false;
    }
    go_note_in(&notes[..len])
}

/// Whether the notes in `notes` (Elf64_Nhdr: namesz, descsz, type, then name and descriptor,
/// each padded to 4 bytes) include Go's build id.
fn go_note_in(notes: &[u8]) -> bool {
    let word = |at: usize| notes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let pad = |n: usize| (n + 3) & !3;
    let mut at = 0;
    while let (Some(namesz), Some(descsz), Some(kind)) = (word(at), word(at + 4), word(at + 8)) {
        // Go's linker writes the name padded: "Go\0\0", namesz 4.
        let name = notes.get(at + 12..at + 12 + namesz).map(|n| n.split(|&b| b == 0).next().unwrap_or_default());
        if kind as u32 == GO_BUILD_ID_NOTE && name == Some(b"Go".as_slice()) {
            return true;
        }
        at += 12 + pad(namesz) + pad(descsz);
    }
    false
}

fn pread(fd: i32, buf: &mut [u8], offset: u64) -> i64 {
    // SAFETY: reading into a live buffer of the given size.
    unsafe { sys::syscall(libc::SYS_pread64, &[fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, offset]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify_file(path: &str) -> ExecImage {
        let path = std::ffi::CString::new(path).unwrap();
        // SAFETY: a NUL-terminated path.
        unsafe { classify(path.as_ptr()) }
    }

    #[test]
    fn a_dynamic_program_keeps_the_preload() {
        assert_eq!(classify_file("/bin/sh"), ExecImage::Preload);
        assert_eq!(classify_file("/no/such/file"), ExecImage::Preload);
    }

    #[test]
    fn go_s_build_id_note_is_found_among_others() {
        let mut notes = Vec::new();
        for (name, kind, desc) in [(&b"GNU\0"[..], 3u32, &[7u8; 20][..]), (&b"Go\0\0"[..], 4, &[1u8; 83][..])] {
            notes.extend((name.len() as u32).to_le_bytes());
            notes.extend((desc.len() as u32).to_le_bytes());
            notes.extend(kind.to_le_bytes());
            notes.extend(name);
            notes.resize(notes.len().next_multiple_of(4), 0);
            notes.extend(desc);
            notes.resize(notes.len().next_multiple_of(4), 0);
        }
        assert!(go_note_in(&notes));
        assert!(!go_note_in(&notes[..40]), "only the GNU note");
        assert!(!go_note_in(&[]));
    }
}
