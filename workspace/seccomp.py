"""The shell sandbox's seccomp filter: the system calls a container runtime refuses (Docker's
default profile, less what it allows on current kernels), answered ``EPERM``; everything else
allowed. bubblewrap loads it (``--seccomp FD``) right before it runs the command.

The BPF program is made by libseccomp (``libseccomp.so.2``, Debian's ``libseccomp2``, which
``apt`` itself depends on, so it is on every Debian system) through ``ctypes``: the same
library Docker, systemd and Flatpak use, without a Python package of its own. libseccomp
handles what a hand-written filter gets wrong: the architecture check, the x32 ABI and the
32-bit x86 calls of a 64-bit kernel.

Refused: the kernel keyring (``keyctl``, ``add_key``, ``request_key``: the keyring is the
server user's; docs/semantics.md §11.3), mounts and namespaces (``mount``, the new mount API,
``unshare``, ``setns``, ``clone`` with a namespace flag; ``clone3`` answers ``ENOSYS`` so the
C library falls back to ``clone``, whose flags can be checked), modules and kexec, ``bpf``,
``perf_event_open``, ``userfaultfd``, ``io_uring``, file handles (``open_by_handle_at``),
clocks, swap, reboot, accounting, quotas, the kernel log, and ``personality`` flags that
weaken ASLR, and making a FIFO (``mknod``/``mknodat`` of ``S_IFIFO``: ``mkfifo`` answers
``EPERM``; a FIFO in the worktree would block the server's git). Kept: ``ptrace`` and
``process_vm_*`` (gdb, strace; since Linux 4.8 ptrace cannot skip the filter, and the PID
namespace shows the command only its own processes).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat

REFUSED = [
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "query_module",
    "get_kernel_syms",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "lookup_dcookie",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "name_to_handle_at",
    "open_by_handle_at",
    "settimeofday",
    "stime",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "nfsservctl",
    "sysfs",
    "_sysctl",
    "uselib",
    "ustat",
    "vm86",
    "vm86old",
    "iopl",
    "ioperm",
    "fanotify_init",
]

CLONE_NAMESPACES = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
# personality(2) flags that switch off address-space randomisation or make data executable.
PERSONALITY_UNSAFE = (
    0x0040000,  # ADDR_NO_RANDOMIZE
    0x0100000,  # MMAP_PAGE_ZERO
    0x0200000,  # ADDR_COMPAT_LAYOUT
    0x0400000,  # READ_IMPLIES_EXEC
)
PERSONALITY_QUERY_BIT = 0x80000000  # set in personality(0xffffffff), the query, never a flag

ACT_ALLOW = 0x7FFF0000
ARCH_X86_64 = 0xC000003E
ARCH_X86 = 0x40000003
ARCH_X32 = 0x4000003E
CMP_MASKED_EQ = 7
S_IFMT = 0o170000  # the file type bits of a mode (``stat.S_IFMT`` is a function)


def _errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class Unavailable(Exception):
    """No filter can be made here (no libseccomp); the message says why."""


def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as exc:
        raise Unavailable(f"libseccomp is not installed ({exc})") from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_arch_native.restype = ctypes.c_uint32
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


@functools.cache
def program() -> bytes:
    """The filter as a BPF program (what ``bwrap --seccomp`` reads); ``Unavailable``."""
    lib = _library()
    ctx = lib.seccomp_init(ACT_ALLOW)
    if not ctx:
        raise Unavailable("seccomp_init failed")
    try:
        if lib.seccomp_arch_native() == ARCH_X86_64:
            # The 32-bit and x32 entry points of the same kernel get the same rules.
            for arch in (ARCH_X86, ARCH_X32):
                lib.seccomp_arch_add(ctx, arch)
        eperm = _errno(errno.EPERM)
        for name in REFUSED:
            _rule(lib, ctx, eperm, name)
        for flag in CLONE_NAMESPACES:
            _rule(lib, ctx, eperm, "clone", _ArgCmp(0, CMP_MASKED_EQ, flag, flag))
        for flag in PERSONALITY_UNSAFE:
            mask = flag | PERSONALITY_QUERY_BIT
            _rule(lib, ctx, eperm, "personality", _ArgCmp(0, CMP_MASKED_EQ, mask, flag))
        _rule(lib, ctx, _errno(errno.ENOSYS), "clone3")
        # No FIFO: one in the worktree (a nested repository's ``.git/HEAD``) blocks the
        # server's git that opens it to tell a repository (docs/security.md, "The rules": no
        # server process blocks on anything a worktree holds). The mode is mknod's 2nd
        # argument, mknodat's 3rd.
        for name, arg in (("mknod", 1), ("mknodat", 2)):
            _rule(lib, ctx, eperm, name, _ArgCmp(arg, CMP_MASKED_EQ, S_IFMT, stat.S_IFIFO))
        fd = os.memfd_create("agentplat-seccomp")
        try:
            code = lib.seccomp_export_bpf(ctx, fd)
            if code < 0:
                raise Unavailable(f"seccomp_export_bpf failed: {os.strerror(-code)}")
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks)
    finally:
        lib.seccomp_release(ctx)


def _rule(lib: ctypes.CDLL, ctx: int, action: int, name: str, *args: _ArgCmp) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number == -1:  # a call this libseccomp does not know: no kernel it knows has it
        return
    array = (_ArgCmp * len(args))(*args) if args else None
    code = lib.seccomp_rule_add_array(ctx, action, number, len(args), array)
    if code < 0 and code != -errno.EEXIST:
        raise Unavailable(f"seccomp rule for {name} refused: {os.strerror(-code)}")
