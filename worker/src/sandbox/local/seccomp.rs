//! The seccomp filter every local sandbox process runs under: system calls
//! an agent never needs and that widen what a compromised one could reach
//! (mounting, tracing other processes, the kernel keyring, BPF, loading
//! modules, joining or making namespaces, ...) fail with `EPERM`; everything
//! else is allowed. It is compiled once, with `seccompiler`, to the classic
//! BPF program bubblewrap takes on `--seccomp FD`; bubblewrap installs it
//! after it has built the sandbox, so it binds the sandbox and not the setup.
//! A call from another architecture's ABI (x32, i386) kills the process.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

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
];

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
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for instruction in &program {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_to_whole_instructions() {
        let bytes = program().expect("compiles");
        assert!(!bytes.is_empty() && bytes.len().is_multiple_of(8));
        assert!(DENIED.iter().any(|(n, _)| *n == "mount") && DENIED.iter().any(|(n, _)| *n == "ptrace"));
    }
}
