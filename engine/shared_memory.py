"""System shared memory regions (Triton's extension): inputs read from, and outputs written to, POSIX shm.

A client creates a region with shm_open (tritonclient.utils.shared_memory does) and registers it by name with its
key, offset and size; requests then name the region, an offset and a byte size instead of sending the tensor. The
region is mapped once at registration; an input becomes a numpy view on the mapping (no copy); an output is written
into it. Regions belong to this server process and are unmapped at unregister and at shutdown. Linux only (it reads
/dev/shm), as is the rest of Infera.
"""

from __future__ import annotations

import mmap
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InvalidArgument, NotFound

# The POSIX shm mount itself, not a temp folder: keys are one name, opened without following links.
SHM_ROOT = Path("/dev/shm")  # nosec B108


class RegionExists(InvalidArgument):
    """A region of that name is registered already (Triton: ALREADY_EXISTS, HTTP 400)."""


@dataclass
class Region:
    """One registered region: where it lives in the client's shared memory object, and its mapping."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def view(self, offset: int, byte_size: int, tensor: str) -> memoryview:
        """`byte_size` bytes at `offset` of the region, refused when they would pass its end."""
        if offset < 0 or byte_size < 0 or offset + byte_size > self.byte_size:
            raise InvalidArgument(
                f"tensor '{tensor}' uses bytes {offset} to {offset + byte_size} of shared memory region "
                f"'{self.name}', which holds {self.byte_size} bytes"
            )
        start = self.offset + offset
        return memoryview(self.mapping)[start : start + byte_size]


class SharedMemoryRegistry:
    """The regions this server process has registered, by name; safe to use from worker threads."""

    def __init__(self) -> None:
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def status(self, name: str | None = None) -> list[dict[str, object]]:
        with self._lock:
            if name:
                region = self._regions.get(name)
                if region is None:
                    raise NotFound(f"Unable to find system shared memory region: '{name}'")
                return [region.to_dict()]
            return [region.to_dict() for region in self._regions.values()]

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map `byte_size` bytes at `offset` of the shared memory object `key`; refuse what does not fit."""
        if not name:
            raise InvalidArgument("a shared memory region needs a name")
        if offset < 0 or byte_size <= 0:
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': offset must be 0 or more and byte_size more "
                f"than 0, got {offset} and {byte_size}"
            )
        path = self._path(name, key)
        with self._lock:
            if name in self._regions:
                raise RegionExists(f"shared memory region '{name}' already in manager")
            try:
                # O_NOFOLLOW: /dev/shm is writable by everyone, and a link planted there must not let outputs
                # be written into a file elsewhere (the database, a model) that this process may write.
                descriptor = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as exc:
                raise InvalidArgument(f"Unable to open shared memory region: '{key}' ({exc.strerror or exc})") from None
            try:
                status = os.fstat(descriptor)
                if not stat.S_ISREG(status.st_mode):
                    raise InvalidArgument(f"Unable to open shared memory region: '{key}' is not a shared memory object")
                size = status.st_size
                if offset + byte_size > size:
                    raise InvalidArgument(
                        f"failed to register shared memory region '{name}': offset {offset} and byte_size "
                        f"{byte_size} pass the end of '{key}', which holds {size} bytes"
                    )
                mapping = mmap.mmap(descriptor, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(descriptor)
            self._regions[name] = Region(name, key, offset, byte_size, mapping)

    def unregister(self, name: str | None = None) -> None:
        """Forget one region (or all); the mapping closes once no request still reads from it."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for each in names:
                self._regions.pop(each, None)  # views on it keep it mapped until they are gone

    def get(self, name: str, tensor: str) -> Region:
        with self._lock:
            region = self._regions.get(name)
        if region is None:
            raise InvalidArgument(f"tensor '{tensor}' names shared memory region '{name}', which is not registered")
        return region

    def close(self) -> None:
        self.unregister()

    @staticmethod
    def _path(name: str, key: str) -> Path:
        cleaned = key.lstrip("/")
        if not cleaned or "/" in cleaned or cleaned in (".", ".."):
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': '{key}' is not a shared memory key"
            )
        return SHM_ROOT / cleaned
