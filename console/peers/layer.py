"""The channel layer of a host's workers without Redis: Channels' in-memory layer whose group messages also reach
the other workers, over Unix datagram sockets in one private folder.

Every broadcast Infera makes goes through the channel layer's groups: registry change notices wake each reconciler,
credential changes empty each /v2 token cache, each process's snapshots feed the cluster view. On Redis a group
spans every process; with `serve --workers N` and no REDIS_URL the default in-memory layer would keep them inside
one worker. `LocalPeerLayer` is that in-memory layer until the runtime `join()`s it: from then on the process binds
`<folder>/<its name>.sock` and every `group_send` is delivered here and sent, once, to each socket of the folder, whose
owner delivers it to its own groups. Groups named `process.<...>` stay in their process (a worker's own dashboards).

The folder is created owner-only (0700): only this user's processes can send to a worker. A datagram carries one
message (msgpack, zlib-compressed when large), checked before it is delivered: a valid group that is not a
`process.*` one, a message with a type, at most MAX_MESSAGE bytes once decompressed. Each peer has an ordered
outbox, so a worker that stalls costs its peers memory up to OUTBOX_LIMIT messages, never a blocked sender. A peer
that went away leaves a socket nobody answers: it is skipped until a process binds that name again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import tempfile
import zlib
from collections import deque
from pathlib import Path
from typing import Any

import msgpack
from channels.layers import BaseChannelLayer, InMemoryChannelLayer

logger = logging.getLogger("console.peers")

PROCESS_GROUP_PREFIX = "process."  # groups that never leave their process
SOCKET_SUFFIX = ".sock"
MAX_DATAGRAM = 4 * 1024 * 1024  # the kernel's usual wmem_max: a larger message is dropped and logged
COMPRESS_ABOVE = 16 * 1024
MAX_MESSAGE = 16 * MAX_DATAGRAM  # decompressed: a datagram that inflates past this is refused, not unpacked
OUTBOX_LIMIT = 256
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL
_PLAIN, _ZLIB = b"m", b"z"


def process_group(name: str) -> str:
    """The name of a group that stays in this process whatever the layer (on Redis it must also be unique)."""
    return PROCESS_GROUP_PREFIX + name


def encode(group: str, message: dict[str, Any]) -> bytes:
    packed = msgpack.packb([group, message], use_bin_type=True)
    if len(packed) > COMPRESS_ABOVE:
        return _ZLIB + zlib.compress(packed, 1)
    return _PLAIN + packed


def decode(datagram: bytes) -> tuple[str, dict[str, Any]]:
    """A peer's [group, message]; ValueError for anything else, before it reaches a group."""
    kind, body = datagram[:1], datagram[1:]
    if kind == _ZLIB:
        inflater = zlib.decompressobj()
        body = inflater.decompress(body, MAX_MESSAGE)
        if inflater.unconsumed_tail:
            raise ValueError(f"a peer message inflates past {MAX_MESSAGE} bytes")
    elif kind != _PLAIN:
        raise ValueError(f"not a peer message (kind {kind!r})")
    unpacked = msgpack.unpackb(body, raw=False)
    if not isinstance(unpacked, list) or len(unpacked) != 2:
        raise ValueError("a peer message is [group, message]")
    group, message = unpacked
    if not isinstance(group, str) or not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ValueError("a peer message is [group, message], the message with a type")
    if len(group) >= BaseChannelLayer.MAX_NAME_LENGTH or not BaseChannelLayer.group_name_regex.match(group):
        raise ValueError(f"a peer message names no valid group: {group[:100]!r}")
    if group.startswith(PROCESS_GROUP_PREFIX):
        raise ValueError(f"group {group!r} stays in its process: no peer sends to it")
    return group, message


def socket_folder(directory: Path) -> Path:
    """`directory`, or a private folder under the temporary directory when its socket paths would be too long."""
    longest = directory / ("x" * 63 + SOCKET_SUFFIX)
    if len(os.fsencode(longest)) <= MAX_SOCKET_PATH:
        return directory
    digest = hashlib.sha256(os.fsencode(directory.resolve())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"infera-peers-{os.getuid()}-{digest}"


class LocalPeerLayer(InMemoryChannelLayer):
    """In-memory groups, shared with the processes that joined the same folder (CONFIG: `directory`)."""

    def __init__(self, directory: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.directory = Path(directory) if directory else None
        self.endpoint: PeerEndpoint | None = None

    @property
    def joined(self) -> bool:
        return self.endpoint is not None

    async def join(self, name: str) -> None:
        """From now on, share every group (but `process.*` ones) with the other processes of the folder."""
        if self.endpoint is not None:
            return
        if self.directory is None:
            raise RuntimeError("LocalPeerLayer needs CONFIG['directory'] to join its peers")
        self.endpoint = PeerEndpoint(socket_folder(self.directory), name, self._deliver)
        self.endpoint.open()

    async def leave(self) -> None:
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            await endpoint.close()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        await super().group_send(group, message)
        endpoint = self.endpoint
        if endpoint is not None and not group.startswith(PROCESS_GROUP_PREFIX):
            endpoint.broadcast(encode(group, message))

    async def _deliver(self, group: str, message: dict[str, Any]) -> None:
        """A peer's group message, to this process's members of the group (and no further)."""
        await InMemoryChannelLayer.group_send(self, group, message)


class PeerEndpoint:
    """This process's socket in the folder, and a link to each other socket found there."""

    def __init__(self, folder: Path, name: str, deliver: Any) -> None:
        self.folder = folder
        self.name = name
        self.path = folder / f"{name}{SOCKET_SUFFIX}"
        self.deliver = deliver
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sock: socket.socket | None = None
        self.links: dict[Path, PeerLink] = {}
        self.received = 0
        self.unreadable = 0
        self._deliveries: set[asyncio.Task[None]] = set()

    def open(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.folder.stat().st_uid != os.getuid() or self.folder.stat().st_mode & 0o077:
            raise PermissionError(f"{self.folder} must belong to this user and be private (mode 0700)")
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # ours from a run that ended without cleaning up
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # as large as the kernel allows: a burst of snapshots fits
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, MAX_DATAGRAM)
        sock.bind(os.fspath(self.path))
        self.sock = sock
        self.loop.add_reader(sock.fileno(), self._readable)
        logger.info("sharing channel-layer groups with the other workers through %s", self.folder)

    async def close(self) -> None:
        if self.sock is not None and self.loop is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        for link in self.links.values():
            link.close()
        self.links.clear()
        if self._deliveries:
            await asyncio.gather(*self._deliveries, return_exceptions=True)

    def peers(self) -> list[Path]:
        """The other sockets in the folder now."""
        try:
            return sorted(p for p in self.folder.glob(f"*{SOCKET_SUFFIX}") if p != self.path)
        except OSError:
            return []

    def broadcast(self, datagram: bytes) -> None:
        """Queue `datagram` for every peer; returns at once (callable from any thread)."""
        loop = self.loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop:
            loop.call_soon_threadsafe(self.broadcast, datagram)
            return
        if len(datagram) > MAX_DATAGRAM:
            logger.warning("a message of %d bytes is too large for the workers' sockets; dropped", len(datagram))
            return
        present = self.peers()
        for path in [p for p in self.links if p not in present]:
            self.links.pop(path).close()
        for path in present:
            link = self.links.get(path)
            if link is None:
                link = self.links[path] = PeerLink(path, loop)
            link.put(datagram)

    def _readable(self) -> None:
        while self.sock is not None:
            try:
                datagram = self.sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                logger.warning("reading the workers' socket failed: %s", exc)
                return
            try:
                group, message = decode(datagram)
            except Exception as exc:  # noqa: BLE001 - a stray datagram must not stop the others
                self.unreadable += 1
                if self.unreadable == 1 or self.unreadable % 100 == 0:
                    logger.warning("%d unreadable datagrams on %s (%s)", self.unreadable, self.path, exc)
                continue
            self.received += 1
            task = asyncio.ensure_future(self.deliver(group, message))
            self._deliveries.add(task)
            task.add_done_callback(self._deliveries.discard)


class PeerLink:
    """One peer's socket: datagrams sent in order, queued while its receive queue is full."""

    def __init__(self, path: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.path = path
        self.loop = loop
        self.sock: socket.socket | None = None
        self.outbox: deque[bytes] = deque()
        self.dropped = 0
        self._flushing: asyncio.Task[None] | None = None

    def put(self, datagram: bytes) -> None:
        if self._flushing is not None:
            self._queue(datagram)
            return
        try:
            self._socket().send(datagram)
        except (BlockingIOError, InterruptedError):
            self._queue(datagram)
            self._flushing = self.loop.create_task(self._flush())
        except OSError:  # nobody bound there now (a worker restarting): try again with the next message
            self.close()

    def _queue(self, datagram: bytes) -> None:
        if len(self.outbox) >= OUTBOX_LIMIT:
            self.outbox.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % OUTBOX_LIMIT == 0:
                logger.warning("peer %s is not reading its messages: %d dropped", self.path.stem, self.dropped)
        self.outbox.append(datagram)

    async def _flush(self) -> None:
        try:
            while self.outbox:
                # connected datagram sockets wait for room in the peer's queue
                await self.loop.sock_sendall(self._socket(), self.outbox[0])
                self.outbox.popleft()
        except OSError:
            self.close()
        finally:
            self._flushing = None

    def _socket(self) -> socket.socket:
        if self.sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_DATAGRAM)
            try:
                sock.connect(os.fspath(self.path))
            except OSError:
                sock.close()
                raise
            self.sock = sock
        return self.sock

    def close(self) -> None:
        self.outbox.clear()
        if self._flushing is not None and self._flushing is not asyncio.current_task():
            self._flushing.cancel()
        self._flushing = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
