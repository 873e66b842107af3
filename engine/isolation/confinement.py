"""What a confined process may still do, set by the process on itself before it runs untrusted code.

- Landlock (Linux 5.13+): reads and executes only beneath the readable paths, writes only beneath the writable
  ones, no TCP bind or connect (ABI 4), no abstract Unix sockets or signals outside the sandbox (ABI 6).
- A seccomp filter: no socket of any family but IPv4 and IPv6 (those stay inside the network namespace and under
  Landlock's TCP rules), so no connect() to a path Unix socket such as PostgreSQL's, which Landlock (up to ABI 7)
  does not cover; socketpair() only for connected stream pairs; no io_uring, which could open sockets around the
  filter.
- No capabilities, none in the bounding set, so root's process cannot read another process's memory or
  environment (`/proc/<pid>/environ` needs ptrace access: CAP_SYS_PTRACE or a superset of the target's
  capabilities) nor bypass file modes.
Each step says what it got, so the caller can report how the process was confined.
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat
import struct
from collections.abc import Iterable
from pathlib import Path

_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2

# ---- Landlock

_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_RULE_PATH_BENEATH = 1
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_CHANGES = sum(1 << bit for bit in range(4, 13))  # remove dir and file, make char, dir, reg, sock, fifo, block, sym
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3 and 5
_FILE_ONLY = _EXECUTE | _WRITE_FILE | _READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV  # what a rule on a file may grant
_NET_TCP = (1 << 0) | (1 << 1)  # bind and connect, ABI 4
_SCOPES = (1 << 0) | (1 << 1)  # abstract unix sockets and signals outside the sandbox, ABI 6
READS = _EXECUTE | _READ_FILE | _READ_DIR


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers; 0 without Landlock."""
    libc = ctypes.CDLL(None, use_errno=True)
    return max(0, libc.syscall(_LANDLOCK_CREATE_RULESET, None, 0, 1))


def restrict_paths(readable: Iterable[Path], writable: Iterable[Path], devices: Iterable[Path] = ()) -> str:
    """With Landlock: reads only beneath `readable` (and `writable`), writes only beneath `writable` and to
    `devices` (such as /dev/null), no TCP, no abstract Unix sockets, no signals outside; says what held.

    Paths that do not exist are skipped; a rule on a file grants only what a file can have."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = landlock_abi()
    if abi < 1:
        return "none: Landlock is not available"
    fs = READS | _WRITE_FILE | _FS_CHANGES
    fs |= (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0) | (_FS_IOCTL_DEV if abi >= 5 else 0)
    size = 8 * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    attr = (ctypes.c_uint64 * 3)(fs, _NET_TCP if abi >= 4 else 0, _SCOPES if abi >= 6 else 0)
    ruleset = libc.syscall(_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        return f"none: Landlock refused the ruleset ({os.strerror(ctypes.get_errno())})"
    writes = fs & ~_FS_IOCTL_DEV
    rules = [(Path(p), READS) for p in readable] + [(Path(p), writes) for p in writable]
    rules += [(Path(p), _READ_FILE | _WRITE_FILE | (fs & _FS_TRUNCATE)) for p in devices]
    try:
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not on this machine: nothing to allow
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access &= _FILE_ONLY
                rule = _PathBeneath(access & fs, fd)
                if libc.syscall(_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                    return f"none: Landlock refused a rule for {path} ({os.strerror(ctypes.get_errno())})"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.syscall(_LANDLOCK_RESTRICT_SELF, ruleset, 0):
            return f"none: Landlock could not restrict this process ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    held = f"Landlock ABI {abi}: reads only in the allowed folders, writes only in its own"
    return held + ("; no TCP" if abi >= 4 else "") + ("; no abstract sockets or signals outside" if abi >= 6 else "")


# ---- seccomp: socket families

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {"x86_64": {"socket": 41, "socketpair": 53}, "aarch64": {"socket": 198, "socketpair": 199}}
_IO_URING_SETUP = 425  # the same on both
_X32_BIT = 0x40000000
_AF_UNIX, _AF_INET, _AF_INET6, _SOCK_STREAM = 1, 2, 10, 1
_LD_ABS, _JEQ, _JGE, _AND, _RET = 0x20, 0x15, 0x35, 0x54, 0x06
_ALLOW, _DENY = 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_ERRNO | EACCES
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24  # offsets in struct seccomp_data (the low half of each argument)


def _socket_filter(machine: str) -> list[tuple[int, int, int, int]]:
    """The BPF program: (code, jump if true, jump if false, k) per instruction."""
    calls = _SYSCALLS[machine]
    return [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 1, 0, _AUDIT_ARCH[machine]),
        (_RET, 0, 0, _DENY),  # another ABI (i386, through int 0x80): nothing at all
        (_LD_ABS, 0, 0, _NR),
        (_JGE, 0, 1, _X32_BIT),
        (_RET, 0, 0, _DENY),  # x32 numbers
        (_JEQ, 0, 1, _IO_URING_SETUP),
        (_RET, 0, 0, _DENY),
        (_JEQ, 0, 5, calls["socket"]),
        (_LD_ABS, 0, 0, _ARG0),
        (_JEQ, 2, 0, _AF_INET),
        (_JEQ, 1, 0, _AF_INET6),
        (_RET, 0, 0, _DENY),
        (_RET, 0, 0, _ALLOW),
        (_JEQ, 0, 6, calls["socketpair"]),
        (_LD_ABS, 0, 0, _ARG0),
        (_JEQ, 0, 3, _AF_UNIX),
        (_LD_ABS, 0, 0, _ARG1),
        (_AND, 0, 0, 0xF),  # the type without SOCK_CLOEXEC and SOCK_NONBLOCK
        (_JEQ, 1, 0, _SOCK_STREAM),
        (_RET, 0, 0, _DENY),
        (_RET, 0, 0, _ALLOW),
    ]


def forbid_local_sockets() -> str:
    """Install the seccomp filter: sockets only of IPv4 and IPv6, stream socketpairs; says what held."""
    machine = platform.machine()
    if machine not in _SYSCALLS:
        return f"none: no socket filter for {machine}"
    program = b"".join(struct.pack("=HBBI", *instruction) for instruction in _socket_filter(machine))
    buffer = ctypes.create_string_buffer(program, len(program))

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(
        _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0
    ):
        return f"none: seccomp refused the filter ({os.strerror(ctypes.get_errno())})"
    return "only IPv4 and IPv6 sockets"


# ---- capabilities


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> str:
    """Give up every capability, for this process and whatever it executes (root's included); says what held."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM without CAP_SETPCAP: none to drop then
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data):
        return f"capabilities kept ({os.strerror(ctypes.get_errno())})"
    return "no capabilities"
