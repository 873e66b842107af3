"""Trial loads of untrusted model versions in a child process, so a loader bug cannot run code in the server.

The child is a fresh interpreter (`python -I`) that reads the parent's request, then confines itself before it
reads any file it was sent (engine.isolation.confinement): no network (a network namespace of its own with only a down
loopback, where the kernel allows one, and Landlock's TCP rules), no Unix sockets (a seccomp filter: path sockets
such as PostgreSQL's are not covered by Landlock), no capabilities (so no other process's /proc/<pid>/environ or
memory), reads only in the version folder, the engine's package, the Python install and the system's libraries
(nothing of the server's var folder: database, secret key, model store), no file writes outside its own empty
temporary folder, which is also its home and working directory, and no signals to other processes (Landlock, where
the kernel has it), an environment holding no secret, and limits on address space, CPU time, open files and file
size; the parent kills its whole process group when the wall-clock timeout passes.
It completes the config and loads the version once on the CPU through the same code as a real load
(engine.serving.placement.trial_load), then prints the effective config as JSON on its last line of output. A failure
reason it gives is shown only bounded and printable (`shown_reason`).
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
import site
import subprocess  # nosec B404
import sys
import sysconfig
import tempfile
import unicodedata
from pathlib import Path

import engine
from engine.config.model_config import ModelConfig
from engine.config.names import without_folders
from engine.config.text_format import config_to_dict, parse_config_json
from engine.errors import InferaError, InvalidArgument, LoadError
from engine.isolation.confinement import drop_capabilities, forbid_local_sockets, restrict_paths
from engine.settings import SandboxSettings

log = logging.getLogger("infera.engine")

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# what the child may see of the parent's environment: nothing that could hold a secret
PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH")
MAX_OPEN_FILES = 1024
# a failure reason the child wrote is shown to viewers (the version's error, the audit log): bounded
MAX_REASON_CHARS = 2000
MAX_REASON_LINES = 10
MAX_FILE_BYTES = 1 << 30
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
# the project's folder leaves sys.path once the engine is imported: the child may not list it (the var folder)
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from engine.isolation.sandbox import child_main; sys.path.remove(sys.argv[1]); sys.exit(child_main(sys.argv[2:]))"
)
PYTHON_INSTALL = tuple(
    dict.fromkeys(
        Path(p)
        for p in (
            sys.prefix,
            sys.base_prefix,
            sys.exec_prefix,
            sys.base_exec_prefix,
            *(sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")),
            *site.getsitepackages(),
            Path(sys.executable).resolve().parent.parent,
        )
    )
)
# what the interpreter, the runtimes' native libraries and their CPU probes read at start-up (found with strace)
SYSTEM_READABLE = tuple(
    Path(p)
    for p in (
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/usr/lib",
        "/usr/lib32",
        "/usr/lib64",
        "/usr/libx32",
        "/usr/share/locale",
        "/usr/share/zoneinfo",
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/localtime",
        "/dev/urandom",
        "/dev/zero",
        "/proc/self",  # its own pid's folder, opened before the rules hold: no other process's
        "/proc/cpuinfo",
        "/proc/meminfo",
        "/proc/stat",
        "/sys/devices/system/cpu",
    )
)
DEVICES = (Path("/dev/null"),)


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
            [sys.executable, "-I", "-B", "-c", _CHILD, str(PROJECT_ROOT), *limits],
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
    store = Path(version_dir).parent.parent
    try:
        return _outcome(process.returncode, out, err, settings)
    except LoadError as exc:
        raise LoadError(shown_reason(without_folders(exc.reason, store))) from None
    except InvalidArgument as exc:
        raise InvalidArgument(shown_reason(without_folders(exc.message, store))) from None


def shown_reason(text: str) -> str:
    """A failure reason the child wrote, as the version's error and the audit log may show it: printable
    characters only (no terminal escapes, no bidirectional overrides), at most MAX_REASON_LINES lines and
    MAX_REASON_CHARS characters."""
    lines = []
    for line in str(text).splitlines():
        kept = "".join(c if c == "\t" or unicodedata.category(c)[0] != "C" else "\ufffd" for c in line)
        if kept.strip():
            lines.append(kept.replace("\t", " ").rstrip())
    shown = "\n".join(lines[:MAX_REASON_LINES])
    if len(lines) > MAX_REASON_LINES or len(shown) > MAX_REASON_CHARS:
        shown = shown[: MAX_REASON_CHARS - 1].rstrip() + "…"
    return shown or "the trial load failed and gave no reason"


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


def confine(memory_mb: int, cpu_seconds: int, writable: Path, readable: list[Path]) -> str:
    """Limit this process, cut it off the network and Unix sockets, drop its capabilities, keep its reads in
    `readable` and its writes in `writable`; says what isolation it got."""
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    network = isolate_network()  # needs CAP_SYS_ADMIN (or a user namespace): before the capabilities go
    capabilities = drop_capabilities()
    sockets = forbid_local_sockets()
    files = restrict_paths(readable, [writable], DEVICES)
    return f"network: {network}; sockets: {sockets}; {capabilities}; files: {files}"


def readable_paths(version_dir: Path, config: ModelConfig) -> list[Path]:
    """What a trial may read: the version folder (and a python model's own environment inside its model folder),
    the engine's package, the Python install and the system's libraries; nothing else of the model store, of the
    server's var folder (database, secret key) or of other processes."""
    paths = [version_dir, Path(engine.__file__).parent, *PYTHON_INSTALL, *SYSTEM_READABLE]
    environment = config.parameters.get("EXECUTION_ENV_PATH", "").strip()
    if environment:
        model_dir = version_dir.parent.resolve()
        folder = Path(environment.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir))).resolve()
        if folder.is_relative_to(model_dir) and folder != model_dir:
            paths.append(folder)
    return paths


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


def child_main(argv: list[str]) -> int:
    """Entry point of the child: read the parent's request from stdin, confine, complete, trial-load, answer on
    stdout."""
    request = json.loads(sys.stdin.buffer.read())
    version_dir = Path(request["version_dir"])
    given = parse_config_json(request["config"])
    isolation = confine(int(argv[0]), int(argv[1]), Path.cwd(), readable_paths(version_dir, given))
    # imported after confinement: the backends and the files are what is untrusted
    from engine.serving.placement import trial_load
    from engine.serving.repository import complete_config

    try:
        config = complete_config(request["name"], version_dir.parent, version_dir, given)
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
