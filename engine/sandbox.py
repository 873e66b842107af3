"""Trial loads of untrusted model versions in a child process, so a loader bug cannot run code in the server.

The child is a fresh interpreter (`python -I`) that confines itself before it reads anything it was sent: no
network (a network namespace of its own with only a down loopback, where the kernel allows one, and Landlock's TCP
rules), no file writes outside its own empty temporary folder, which is also its home and working directory, and
no signals to other processes (Landlock, where the kernel has it), an environment holding no secret, and limits on
address space, CPU time, open files and file size; the parent kills its whole process group when the wall-clock
timeout passes.
It completes the config and loads the version once on the CPU through the same code as a real load
(engine.lifecycle.trial_load), then prints the effective config as JSON on its last line of output.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import resource
import shutil
import signal
import subprocess  # nosec B404
import sys
import tempfile
from pathlib import Path

from engine.config import ModelConfig
from engine.config_format import config_to_dict, parse_config_json
from engine.errors import InferaError, InvalidArgument, LoadError
from engine.names import without_folders
from engine.settings import SandboxSettings

log = logging.getLogger("infera.engine")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# what the child may see of the parent's environment: nothing that could hold a secret
PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH")
MAX_OPEN_FILES = 1024
MAX_FILE_BYTES = 1 << 30
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from engine.sandbox import child_main; sys.exit(child_main(sys.argv[2:]))"
)


def trial_load_isolated(
    name: str, version_dir: Path, config: ModelConfig, settings: SandboxSettings, gpus: int
) -> ModelConfig:
    """The effective config of a version after a trial load in the sandbox; LoadError with the reason otherwise."""
    scratch = Path(tempfile.mkdtemp(prefix="infera-trial-"))
    request = json.dumps(
        {"name": name, "version_dir": str(Path(version_dir).resolve()), "config": config_to_dict(config), "gpus": gpus}
    )
    environment = {key: os.environ[key] for key in PASSED_VARIABLES if key in os.environ}
    environment |= {
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "OMP_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
        "CUDA_VISIBLE_DEVICES": "",  # a trial runs on the CPU
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    limits = [str(settings.memory_mb), str(settings.cpu_seconds)]
    try:
        # bandit B603: the command is this interpreter on our own module with fixed arguments, never a shell
        process = subprocess.Popen(  # nosec B603
            [sys.executable, "-I", "-c", _CHILD, str(PROJECT_ROOT), *limits],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=scratch,
            env=environment,
            start_new_session=True,  # its own process group, killed as a whole
        )
        try:
            out, err = process.communicate(request.encode(), timeout=settings.timeout_seconds)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            raise LoadError(
                f"the trial load took longer than {settings.timeout_seconds} s and was stopped "
                "(INFERA_SANDBOX_TIMEOUT_SECONDS)"
            ) from None
        finally:
            _kill_group(process)  # anything it left running goes with it
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    try:
        return _outcome(process.returncode, out, err, settings)
    except LoadError as exc:
        raise LoadError(without_folders(exc.reason, Path(version_dir).parent.parent)) from None
    except InvalidArgument as exc:
        raise InvalidArgument(without_folders(exc.message, Path(version_dir).parent.parent)) from None


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _outcome(code: int, out: bytes, err: bytes, settings: SandboxSettings) -> ModelConfig:
    lines = out.decode("utf-8", "replace").strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if isinstance(answer, dict) and answer.get("ok") is True:
        if not answer.get("network_isolated"):
            log.debug("trial load ran without network isolation: %s", answer.get("isolation", ""))
        return parse_config_json(answer["config"])
    if isinstance(answer, dict) and "reason" in answer:
        if answer.get("kind") == "invalid":
            raise InvalidArgument(answer["reason"])
        raise LoadError(answer["reason"])
    if code == -signal.SIGXCPU:
        raise LoadError(f"the trial load used more than {settings.cpu_seconds} s of CPU (INFERA_SANDBOX_CPU_SECONDS)")
    if code == -signal.SIGKILL:
        raise LoadError(
            f"the trial load was killed: over {settings.cpu_seconds} s of CPU (INFERA_SANDBOX_CPU_SECONDS) or out "
            "of memory"
        )
    if code < 0:
        raise LoadError(f"the trial load crashed ({signal.Signals(-code).name}){_tail(err)}")
    if _mentions_memory(err):
        raise LoadError(f"the trial load needed more than {settings.memory_mb} MB of memory (INFERA_SANDBOX_MEMORY_MB)")
    raise LoadError(f"the trial load failed (exit status {code}){_tail(err)}")


def _mentions_memory(err: bytes) -> bool:
    text = err.decode("utf-8", "replace")
    return "MemoryError" in text or "std::bad_alloc" in text or "Cannot allocate memory" in text


def _tail(err: bytes) -> str:
    text = err.decode("utf-8", "replace").strip()
    return f": {text.splitlines()[-1][:300]}" if text else ""


# ---- the child side


def confine(memory_mb: int, cpu_seconds: int, writable: Path) -> str:
    """Limit this process, cut it off the network and keep its writes in `writable`; says what isolation it got."""
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    network = isolate_network()
    return f"network: {network}; files: {restrict_writes(writable)}"


def isolate_network() -> str:
    """Enter a network namespace of our own: as root directly, else inside a user namespace mapped to our ids."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) == 0:
        return "network namespace"
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        with contextlib.suppress(OSError):
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        return "user and network namespace"
    return f"none: unshare failed ({os.strerror(ctypes.get_errno())})"


# Landlock (Linux 5.13+): what a process may still do to files and sockets once it restricts itself
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_FS_WRITES = sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write, remove, make *
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3
_NET_TCP = (1 << 0) | (1 << 1)  # bind and connect, ABI 4
_SCOPES = (1 << 0) | (1 << 1)  # abstract unix sockets and signals outside the sandbox, ABI 6


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict_writes(writable: Path) -> str:
    """With Landlock: no file writes outside `writable`, no TCP, no signals to other processes; says what held."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(_LANDLOCK_CREATE_RULESET, None, 0, 1)
    if abi < 1:
        return f"none: Landlock is not available ({os.strerror(ctypes.get_errno())})"
    fs = _FS_WRITES | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    fields = [fs, _NET_TCP if abi >= 4 else 0, _SCOPES if abi >= 6 else 0]
    size = 8 * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    attr = (ctypes.c_uint64 * 3)(*fields)
    ruleset = libc.syscall(_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        return f"none: Landlock refused the ruleset ({os.strerror(ctypes.get_errno())})"
    try:
        for path, access in ((writable, fs), (Path("/dev/null"), 1 << 1)):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(access, fd)
                if libc.syscall(_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                    return f"none: Landlock refused a rule for {path} ({os.strerror(ctypes.get_errno())})"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.syscall(_LANDLOCK_RESTRICT_SELF, ruleset, 0):
            return f"none: Landlock could not restrict this process ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return f"Landlock ABI {abi}: writes only in its own folder" + ("; no TCP" if abi >= 4 else "")


def child_main(argv: list[str]) -> int:
    """Entry point of the child: confine, read the request from stdin, complete, trial-load, answer on stdout."""
    isolation = confine(int(argv[0]), int(argv[1]), Path.cwd())
    request = json.loads(sys.stdin.buffer.read())
    # imported after confinement: the backends and the files are what is untrusted
    from engine.lifecycle import trial_load
    from engine.repository import complete_config

    version_dir = Path(request["version_dir"])
    try:
        config = complete_config(request["name"], version_dir.parent, version_dir, parse_config_json(request["config"]))
    except InferaError as exc:
        return _answer({"ok": False, "kind": "invalid", "reason": exc.message})
    try:
        trial_load(config, version_dir, int(request["gpus"]))
    except LoadError as exc:
        return _answer({"ok": False, "kind": "load", "reason": exc.reason})
    except InferaError as exc:
        return _answer({"ok": False, "kind": "load", "reason": exc.message})
    except MemoryError:
        return _answer({"ok": False, "kind": "load", "reason": "the trial load ran out of memory"})
    return _answer(
        {
            "ok": True,
            "config": config_to_dict(config),
            "network_isolated": "network: none" not in isolation,
            "isolation": isolation,
        }
    )


def _answer(document: dict) -> int:
    sys.stdout.write("\n" + json.dumps(document) + "\n")
    sys.stdout.flush()
    return 0
