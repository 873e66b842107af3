"""System shared memory regions (Triton's extension): inputs read from, and outputs written to, POSIX shm.

A client creates a region with shm_open (tritonclient.utils.shared_memory does) and registers it by name with its
key, offset and size; requests then name the region, an offset and a byte size instead of sending the tensor.

Regions belong to the caller that registered them (`owner_of`: its token, else its user, else the anonymous
callers as one): its status, unregister and inference requests see only its own, and another caller's region of
any name is "not registered", as if it did not exist. Only an object the server may open for that caller is
registered (`_check_object`): a regular file directly in /dev/shm, opened without following links, owned by the
server's own user (a client over TCP cannot be proven to be any user; PostgreSQL's segment or a 0600 object of
`nobody` are refused), writable by its owner, not a POSIX semaphore (`sem.*`), and not registered by another caller.

Nothing is mapped: the registry keeps a descriptor per region and copies with pread (inputs, into a fresh buffer)
and pwrite (outputs), so an object that shrinks under its region answers 400 naming the region instead of killing
the process with SIGBUS, and no mapping of a huge sparse object costs address space. Linux only (it reads /dev/shm),
as is the rest of Infera.

A request holds the regions it names from its decoding to its answer (`CallerRegions.release`). Unregistering a
region a request holds does what Triton's shared memory manager does: the region stays registered (listed, usable,
its name taken) until the last such request ends, then it goes. Its descriptor is closed once it is gone and no copy
still uses it. Keys under Triton's reserved prefix (`triton_python_backend_shm_region_`, its python backend's own
regions) are refused with Triton's message. Offsets and sizes past a region's end, or past its object's at
registration, are refused with Triton's words first ("Invalid offset + byte size for shared memory region", "failed
to register shared memory region '<name>': invalid args"), Infera's explanation after them.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from engine.errors import InferaError, InvalidArgument, NotFound, PayloadTooLarge
from engine.serving.admission import ANONYMOUS, Principal
from engine.settings import SharedMemoryLimits

# The POSIX shm mount itself, not a temp folder: keys are one name, opened without following links.
SHM_ROOT = Path("/dev/shm")  # nosec B108
# Linux moves at most this many bytes in one read or write call
_CHUNK = 0x7FFFF000
NAME_MAX = 255  # the longest file name /dev/shm holds: a longer key names no object
MAX_NAME_CHARS = 256  # a region's name, kept as long as the region is
# Triton keeps keys under this prefix for the regions its python backend makes (server's common.h)
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
SIZE_MAX = 2**64 - 1  # Triton's size_t: an offset and byte_size summing past it are its "integer overflow"
# a request copying more than this (all its tensors together) is decoded or encoded on a worker thread, not the loop
LOOP_COPY_BYTES = 256 * 1024
T = TypeVar("T")


class CopyOffLoop(Exception):  # noqa: N818 - a signal to the front end, not an error anyone sees
    """A request would copy more shared memory than the event loop should: the front end runs it on a worker thread.

    Not an InferaError: never an answer. The regions that raise it let the next try copy anywhere.
    """


class RegionExists(InvalidArgument):
    """A region of that name is registered already (Triton: ALREADY_EXISTS, HTTP 400)."""


class TooManyRegions(InferaError):
    """A caller, or the server, holds as many regions as its limit allows (HTTP 429, gRPC RESOURCE_EXHAUSTED)."""

    status = 429


class RegionTooLarge(PayloadTooLarge):
    """A region's byte_size, or a caller's regions together, past their limit (HTTP 413, RESOURCE_EXHAUSTED)."""


def owner_of(caller: Principal) -> str:
    """Whose regions a caller sees: its token's, else its user's, else those of every caller of its name."""
    if caller.token_id is not None:
        return f"token:{caller.token_id}"
    if caller.user_id is not None:
        return f"user:{caller.user_id}"
    return f"name:{caller.name}"


@dataclass(eq=False)
class Region:
    """One registered region: where it lives in the client's shared memory object, and the descriptor kept on it."""

    name: str
    key: str
    offset: int
    byte_size: int
    descriptor: int
    identity: tuple[int, int]  # (st_dev, st_ino): the object itself, whatever its key names later
    requests: int = 0  # requests holding it (the registry's lock guards this and `awaiting_unregister`)
    awaiting_unregister: bool = False  # unregistered while requests held it: it goes when the last one ends
    _users: int = 0
    _retired: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def read(self, offset: int, byte_size: int, tensor: str) -> memoryview:
        """A copy of `byte_size` bytes at `offset` of the region; 400 when they pass its end or the object's."""
        self.check_range(offset, byte_size, tensor)
        buffer = np.empty(byte_size, dtype=np.uint8)  # not zeroed: every byte is read into
        view = memoryview(buffer)
        start = self.offset + offset
        with self._descriptor() as descriptor:
            done = 0
            while done < byte_size:
                got = os.preadv(descriptor, [view[done : done + _CHUNK]], start + done)
                if got == 0:
                    raise self._shrank(tensor)
                done += got
        return view

    def write(self, offset: int, data: bytes | memoryview, tensor: str) -> None:
        """Write `data` at `offset` of the region; 400 when it passes the region's end or the object's."""
        self.check_range(offset, len(data), tensor)
        start = self.offset + offset
        view = memoryview(data).cast("B")
        with self._descriptor() as descriptor:
            # past the object's end pwrite would grow it back: refuse, as a read would
            if os.fstat(descriptor).st_size < start + len(view):
                raise self._shrank(tensor)
            done = 0
            while done < len(view):
                done += os.pwrite(descriptor, view[done : done + _CHUNK], start + done)

    def retire(self) -> None:
        """Unregistered: close the descriptor now, or when the last copy using it ends."""
        with self._lock:
            self._retired = True
            if self._users == 0:
                self._close()

    def check_range(self, offset: int, byte_size: int, tensor: str) -> None:
        """Refuse bytes past the region's end (400, naming the tensor and the region) with Triton's words first
        (server src/shared_memory_manager.cc, GetMemoryInfo), in its order: the offset, an overflow, the end."""
        if 0 <= offset < self.byte_size and 0 <= byte_size and offset + byte_size <= self.byte_size:
            return
        uses = (
            f"tensor '{tensor}' uses bytes {offset} to {offset + byte_size} of shared memory region '{self.name}', "
            f"which holds {self.byte_size} bytes"
        )
        if offset < 0 or offset >= self.byte_size:
            raise InvalidArgument(f"Invalid offset for shared memory region: '{self.name}' ({uses})")
        if byte_size > SIZE_MAX - offset:
            raise InvalidArgument(
                f"Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) exceeds maximum value "
                f"({SIZE_MAX}) for region '{self.name}' ({uses})"
            )
        raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{self.name}' ({uses})")

    @contextmanager
    def _descriptor(self) -> Iterator[int]:
        # a descriptor closed under a copy could be reused by another open file: count who uses it
        with self._lock:
            if self._retired:
                raise InvalidArgument(f"shared memory region '{self.name}' was unregistered during the request")
            self._users += 1
        try:
            yield self.descriptor
        finally:
            with self._lock:
                self._users -= 1
                if self._retired and self._users == 0:
                    self._close()

    def _close(self) -> None:
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1

    def _shrank(self, tensor: str) -> InvalidArgument:
        return InvalidArgument(
            f"tensor '{tensor}' uses shared memory region '{self.name}', whose object '{self.key}' shrank below "
            f"the region's end since it was registered; register it again"
        )


class SharedMemoryRegistry:
    """The regions registered with this server process, by owner and name; safe to use from worker threads."""

    def __init__(self, limits: SharedMemoryLimits | None = None) -> None:
        self.limits = limits if limits is not None else SharedMemoryLimits()
        self._regions: dict[tuple[str, str], Region] = {}
        self._lock = threading.Lock()

    def of(self, caller: Principal, *, on_loop: bool = False) -> CallerRegions:
        """The regions `caller` sees, as the codecs look them up; `on_loop`: the lookups run on the event loop, and
        a request that would copy more than LOOP_COPY_BYTES there raises CopyOffLoop (run it on a thread instead)."""
        return CallerRegions(self, caller, on_loop)

    def status(self, name: str | None = None, *, caller: Principal = ANONYMOUS) -> list[dict[str, object]]:
        owner = owner_of(caller)
        with self._lock:
            if name:
                region = self._regions.get((owner, name))
                if region is None:
                    raise NotFound(f"Unable to find system shared memory region: '{name}'")
                return [region.to_dict()]
            return [region.to_dict() for (who, _), region in self._regions.items() if who == owner]

    def register(self, name: str, key: str, offset: int, byte_size: int, *, caller: Principal = ANONYMOUS) -> None:
        """Keep a descriptor on `byte_size` bytes at `offset` of the object `key`; refuse what does not fit."""
        if not name:
            raise InvalidArgument("a shared memory region needs a name")
        if len(name) > MAX_NAME_CHARS:
            raise InvalidArgument(
                f"failed to register shared memory region '{name[:40]}...': a region's name may be at most "
                f"{MAX_NAME_CHARS} characters, got {len(name)}"
            )
        if offset < 0 or byte_size <= 0:
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': invalid args (offset must be 0 or more and "
                f"byte_size more than 0, got {offset} and {byte_size})"
            )
        if byte_size > self.limits.max_region_bytes:
            raise RegionTooLarge(
                f"failed to register shared memory region '{name}': byte_size {byte_size} is over the limit of "
                f"{self.limits.max_region_bytes} bytes (INFERA_SHM_MAX_REGION_MB); a region may be at most "
                f"{self.limits.max_region_bytes} bytes"
            )
        path = self._path(name, key)
        owner = owner_of(caller)
        with self._lock:
            if (owner, name) in self._regions:
                raise RegionExists(f"shared memory region '{name}' already in manager")
            self._check_room(owner, name, byte_size)
            try:
                # O_NOFOLLOW: /dev/shm is writable by everyone, and a link planted there must not let outputs
                # be written into a file elsewhere (the database, a model) that this process may write.
                descriptor = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
            except OSError as exc:
                raise InvalidArgument(f"Unable to open shared memory region: '{key}' ({exc.strerror or exc})") from None
            try:
                status = os.fstat(descriptor)
                identity = (status.st_dev, status.st_ino)
                self._check_object(key, path, status, owner, identity)
                if offset + byte_size > status.st_size:
                    raise InvalidArgument(
                        f"failed to register shared memory region '{name}': invalid args (offset {offset} and "
                        f"byte_size {byte_size} pass the end of '{key}', which holds {status.st_size} bytes)"
                    )
            except BaseException:
                os.close(descriptor)
                raise
            self._regions[(owner, name)] = Region(name, key, offset, byte_size, descriptor, identity)

    def unregister(self, name: str | None = None, *, caller: Principal = ANONYMOUS) -> None:
        """Forget one of the caller's regions (or all of them); one that requests hold goes when the last of them
        ends (Triton's "will be unregistered after in-flight requests complete"); each descriptor closes once no
        copy uses it."""
        owner = owner_of(caller)
        retired = []
        with self._lock:
            keys = [(owner, name)] if name else [key for key in self._regions if key[0] == owner]
            for key in keys:
                region = self._regions.get(key)
                if region is None:
                    continue
                if region.requests:
                    region.awaiting_unregister = True
                else:
                    retired.append(self._regions.pop(key))
        for region in retired:
            region.retire()

    def get(self, name: str, tensor: str, *, caller: Principal = ANONYMOUS, hold: bool = False) -> Region:
        """The caller's region `name` (400 naming `tensor` when it has none); `hold`: a request holds it until it
        calls `let_go`."""
        with self._lock:
            region = self._regions.get((owner_of(caller), name))
            if region is not None and hold:
                region.requests += 1
        if region is None:
            raise InvalidArgument(
                f"Unable to find shared memory region: '{name}' (tensor '{tensor}' names shared memory region "
                f"'{name}', which is not registered)"
            )
        return region

    def let_go(self, region: Region, caller: Principal) -> None:
        """A request that held `region` ended: the region goes now if it was unregistered meanwhile."""
        key = (owner_of(caller), region.name)
        with self._lock:
            region.requests -= 1
            gone = region.requests == 0 and region.awaiting_unregister and self._regions.get(key) is region
            if gone:
                del self._regions[key]
        if gone:
            region.retire()

    def close(self) -> None:
        """Forget every caller's regions (at shutdown)."""
        with self._lock:
            retired = list(self._regions.values())
            self._regions.clear()
        for region in retired:
            region.retire()

    def _check_room(self, owner: str, name: str, byte_size: int) -> None:
        limits = self.limits
        if len(self._regions) >= limits.max_regions:
            raise TooManyRegions(
                f"failed to register shared memory region '{name}': the server holds {limits.max_regions} shared "
                "memory regions, its limit (INFERA_SHM_MAX_REGIONS); unregister regions no longer used"
            )
        mine = [region for (who, _), region in self._regions.items() if who == owner]
        if len(mine) >= limits.max_regions_per_caller:
            raise TooManyRegions(
                f"failed to register shared memory region '{name}': you have {len(mine)} shared memory regions "
                "registered, the limit for one caller (INFERA_SHM_MAX_REGIONS_PER_CALLER); unregister some first"
            )
        total = sum(region.byte_size for region in mine) + byte_size
        if total > limits.max_bytes_per_caller:
            raise RegionTooLarge(
                f"failed to register shared memory region '{name}': your regions would hold {total} bytes, over the "
                f"limit of {limits.max_bytes_per_caller} bytes in all for one caller (INFERA_SHM_MAX_MB_PER_CALLER)"
            )

    def _check_object(
        self, key: str, path: Path, status: os.stat_result, owner: str, identity: tuple[int, int]
    ) -> None:
        """The owner and mode rule: what the server may open for a caller (the module's docstring says why)."""
        refused = f"Unable to open shared memory region: '{key}'"
        if not stat.S_ISREG(status.st_mode):
            raise InvalidArgument(f"{refused} is not a shared memory object")
        if status.st_uid != os.geteuid():
            raise InvalidArgument(
                f"{refused}: a shared memory object must be owned by the server's user (uid {os.geteuid()}); "
                "create it as that user"
            )
        if not status.st_mode & stat.S_IWUSR:
            raise InvalidArgument(f"{refused}: a shared memory object must be writable by its owner")
        if path.name.startswith("sem."):
            raise InvalidArgument(f"{refused}: it is a POSIX semaphore, not a shared memory object")
        if any(region.identity == identity for (who, _), region in self._regions.items() if who != owner):
            raise InvalidArgument(f"{refused}: the object is registered by another caller")

    @staticmethod
    def _path(name: str, key: str) -> Path:
        cleaned = key.lstrip("/")
        shown = key if len(key) <= NAME_MAX else f"{key[:40]}..."
        if not cleaned or "/" in cleaned or "\x00" in cleaned or cleaned in (".", "..") or len(cleaned) > NAME_MAX:
            raise InvalidArgument(  # Triton's text first (server common.cc), then Infera's
                f"cannot register shared memory region '{name}' - invalid shm key '{shown}': '{shown}' is not a "
                f"shared memory key (one name of 1 to {NAME_MAX} characters, after an optional '/')"
            )
        if cleaned.startswith(RESERVED_KEY_PREFIX):
            raise InvalidArgument(
                f"cannot register shared memory region '{name}' with key '{shown}' as the key contains the reserved "
                f"prefix '{RESERVED_KEY_PREFIX}'"
            )
        return SHM_ROOT / cleaned


@dataclass(slots=True)
class CallerRegions:
    """The regions one caller sees, for one request: what its `shared_memory_region` parameters are looked up in."""

    registry: SharedMemoryRegistry
    caller: Principal
    on_loop: bool = False
    copied: int = 0  # bytes this request's tensors copy, counted while on the loop
    held: dict[str, Region] = field(default_factory=dict)  # the regions this request holds until `release`

    def get(self, name: str, tensor: str, byte_size: int = 0) -> Region:
        """The caller's region `name`, for a copy of `byte_size` bytes (CopyOffLoop when too many for the loop);
        the request holds it until `release`."""
        region = self.held.get(name)
        if region is None:
            region = self.held[name] = self.registry.get(name, tensor, caller=self.caller, hold=True)
        if self.on_loop:
            self.copied += byte_size
            if self.copied > LOOP_COPY_BYTES:
                self.on_loop = False  # the next try runs on a worker thread
                raise CopyOffLoop
        return region

    def release(self) -> None:
        """The request has answered: let go of its regions (one unregistered meanwhile goes now)."""
        held, self.held = self.held, {}
        for region in held.values():
            self.registry.let_go(region, self.caller)

    def start_on_loop(self) -> None:
        """The next lookups run on the event loop again, with nothing copied yet (a response after its request)."""
        self.on_loop, self.copied = True, 0

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` here on the loop, or again on a worker thread when it would copy too much for the loop."""
        self.start_on_loop()
        try:
            return work()
        except CopyOffLoop:
            return await asyncio.to_thread(work)
