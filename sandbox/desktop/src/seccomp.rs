//! The seccomp filter every local sandbox process runs under: system calls
//! an agent never needs and that widen what a compromised one could reach
//! (mounting, tracing other processes, the kernel keyring, BPF, loading
//! modules, joining or making namespaces, ...) fail with `EPERM`; everything
//! else is allowed. It is compiled once, with `seccompiler`, to the classic
//! BPF program bubblewrap takes on `--seccomp FD`; bubblewrap installs it
//! after it has built the sandbox, so it binds the sandbox and not the setup.
//! A call from another architecture's ABI kills the process: seccompiler's
//! own check refuses another audit architecture (i386), and on x86-64 a
//! prefix of ours kills x32 calls, which share x86-64's audit architecture
//! and differ only by bit 30 of the call number. `io_uring` is refused: it
//! performs system calls the filter never sees.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use seccompiler::{sock_filter, BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// The system calls refused inside a sandbox.
const DENIED: &[(&str, libc::c_long)] = &[
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("kcmp", libc::SYS_kcmp),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("setns", libc::SYS_setns),
    ("unshare", libc::SYS_unshare),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("acct", libc::SYS_acct),
    ("syslog", libc::SYS_syslog),
    ("quotactl", libc::SYS_quotactl),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("iopl", libc::SYS_iopl),
    ("ioperm", libc::SYS_ioperm),
    ("vhangup", libc::SYS_vhangup),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
];

/// Classic BPF opcodes and seccomp values the x32 prefix uses.
const LOAD_WORD_AT: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JUMP_IF_EQUAL: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JUMP_IF_AT_LEAST: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const RETURN: u16 = 0x06; // BPF_RET | BPF_K
const KILL_PROCESS: u32 = 0x8000_0000; // SECCOMP_RET_KILL_PROCESS
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// Where `struct seccomp_data` keeps the call number and the architecture.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
/// The bit x32 system call numbers carry.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The compiled filter as the bytes bubblewrap reads (native-endian
/// `struct sock_filter`s), or why it could not be built.
pub(crate) fn program() -> Result<&'static [u8], String> {
    static PROGRAM: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();
    PROGRAM.get_or_init(compile).as_deref().map_err(Clone::clone)
}

fn compile() -> Result<Vec<u8>, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("no seccomp filter for this machine: {e}"))?;
    let rules = DENIED.iter().map(|(_, number)| (*number, Vec::new())).collect::<BTreeMap<_, _>>();
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
        .map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
    let program: BpfProgram = filter.try_into().map_err(|e| format!("cannot compile the seccomp filter: {e}"))?;
    let mut bytes = Vec::with_capacity((program.len() + 6) * 8);
    let prefix = if arch == TargetArch::x86_64 { x32_prefix() } else { Vec::new() };
    for instruction in prefix.iter().chain(&program) {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    Ok(bytes)
}

/// Kills a call of another audit architecture or with the x32 bit, then
/// falls through to seccompiler's program (whose jumps are relative).
fn x32_prefix() -> Vec<sock_filter> {
    let op = |code: u16, jt: u8, jf: u8, k: u32| sock_filter { code, jt, jf, k };
    vec![
        op(LOAD_WORD_AT, 0, 0, ARCH_OFFSET),
        op(JUMP_IF_EQUAL, 1, 0, AUDIT_ARCH_X86_64),
        op(RETURN, 0, 0, KILL_PROCESS),
        op(LOAD_WORD_AT, 0, 0, NR_OFFSET),
        op(JUMP_IF_AT_LEAST, 0, 1, X32_SYSCALL_BIT),
        op(RETURN, 0, 0, KILL_PROCESS),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_to_whole_instructions() {
        let bytes = program().expect("compiles");
        assert!(!bytes.is_empty() && bytes.len().is_multiple_of(8));
        assert!(DENIED.iter().any(|(n, _)| *n == "mount") && DENIED.iter().any(|(n, _)| *n == "ptrace"));
        assert!(DENIED.iter().any(|(n, _)| *n == "io_uring_setup"));
        if std::env::consts::ARCH == "x86_64" {
            // The prefix comes first: load the architecture, compare, kill.
            assert_eq!(bytes[..2], LOAD_WORD_AT.to_ne_bytes());
            assert_eq!(bytes[20..24], KILL_PROCESS.to_ne_bytes());
        }
    }
}
