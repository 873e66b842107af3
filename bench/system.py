"""What the figures were measured on: CPU, cores, and the versions of everything in the comparison."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version

from bench.mlserver_peer import mlserver_version
from bench.wrk import WRK


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, which a container narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def package_version(*names: str) -> str:
    """The installed version of the first of `names` found, or '-'."""
    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "-"


def wrk_version() -> str:
    try:
        done = subprocess.run([WRK, "-v"], capture_output=True, text=True, timeout=10)
    except OSError:
        return "-"
    first = (done.stdout or done.stderr).splitlines()
    return first[0].split()[1] if first and len(first[0].split()) > 1 else "-"


def process_cpu_seconds(pid: int) -> float:
    """The user and system CPU time a process (all its threads) has used so far, from /proc; 0.0 where unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: other work on a shared machine shows here."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "-"


def system_info() -> dict[str, str]:
    """The machine and the versions, as the report's first table shows them."""
    return {
        "CPU": cpu_model(),
        "cores": str(usable_cores()),
        "python": platform.python_version(),
        "onnxruntime": package_version("onnxruntime", "onnxruntime-gpu"),
        "torch": package_version("torch"),
        "uvicorn": package_version("uvicorn"),
        "daphne": package_version("daphne"),
        "mlserver": mlserver_version(),
        "wrk": wrk_version(),
        "load average at start": load_average(),
    }
