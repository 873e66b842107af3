"""What a running process holds, read from /proc: resident memory, threads, open file descriptors, child processes.

The soak samples it over time; the hygiene tests compare it before and after thousands of operations. Linux only.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Footprint:
    """One reading of a process: RSS (KiB), threads, open fds, and its direct children (zombies included)."""

    rss_kb: int
    threads: int
    fds: int
    children: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def footprint(pid: int) -> Footprint:
    """Read `pid`'s footprint now; OSError when the process is gone."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return Footprint(
        rss_kb=int(fields["VmRSS"].split()[0]),
        threads=int(fields["Threads"]),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        children=len(child_pids(pid)),
    )


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid`, exited ones not yet reaped (zombies) included."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _parent_of(entry) == pid:
            children.append(int(entry))
    return sorted(children)


def _parent_of(entry: str) -> int | None:
    try:
        stat = Path(f"/proc/{entry}/stat").read_text()
    except OSError:  # it exited while the folder was read
        return None
    # the command name (field 2) may hold spaces and parentheses: the fields after its last ')' are plain
    return int(stat.rsplit(")", 1)[1].split()[1])
