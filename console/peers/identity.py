"""Who this serving process is among replicas and workers: its name, its replica and its worker number.

A replica is one `manage.py serve` (one pod); its name is INFERA_REPLICA_NAME (the host name by default). With
`serve --workers N` the replica runs N worker processes on one port, named `<replica>-w<k>`, and every worker's
settings carry that name as its `replica_name`, so heartbeats, the cluster view and logs tell workers apart the way
they tell replicas apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from console.config import REPLICA_NAME

MAX_NAME = 63
_WORKER_SUFFIX = re.compile(r"-w(\d+)$")


def worker_name(replica: str, index: int) -> str:
    """`<replica>-w<index>`, the replica's part shortened so the whole stays a valid replica name."""
    suffix = f"-w{index}"
    name = replica[: MAX_NAME - len(suffix)].rstrip("-.") + suffix
    if not REPLICA_NAME.fullmatch(name):
        raise ValueError(f"cannot name worker {index} of replica {replica!r}")
    return name


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """This process: `name` is unique among every serving process; workers of one replica share `replica`."""

    name: str
    replica: str
    worker: int | None = None  # None: the replica is this one process
    workers: int = 1

    @classmethod
    def single(cls, replica_name: str) -> ProcessIdentity:
        return cls(name=replica_name, replica=replica_name)

    @classmethod
    def of_worker(cls, name: str, index: int, workers: int) -> ProcessIdentity:
        """Worker `index` of `workers`, from its own name (`<replica>-w<index>`, as `worker_name` made it)."""
        found = _WORKER_SUFFIX.search(name)
        if found is None or int(found.group(1)) != index:
            raise ValueError(f"worker {index} must be named <replica>-w{index}, got {name!r}")
        return cls(name=name, replica=name[: found.start()], worker=index, workers=workers)

    @property
    def has_workers(self) -> bool:
        return self.workers > 1

    def former_name(self, name: str) -> bool:
        """Whether `name` was a process of this replica under another `--workers` count, which no longer exists:
        the replica's own name while it runs workers, a worker's past their number (any worker's while it runs
        alone)."""
        if name == self.name:
            return False
        if name == self.replica:
            return self.has_workers
        found = _WORKER_SUFFIX.search(name)
        if found is None or name != worker_name(self.replica, int(found.group(1))):
            return False
        return not self.has_workers or int(found.group(1)) >= self.workers  # workers count from 0
