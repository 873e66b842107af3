"""The link between the server and a python model's stub process: JSON headers on a socket, tensors in shared memory.

Each side writes tensors into its own memfd region (a bump allocator the writer resets at the start of each
execute) and sends a header that says where they are; the reader copies them out as soon as the header arrives,
so a region is free again once the other side has answered. Nothing is pickled: a stub runs model code, and the
server must never unpickle what it sends.

Messages nobody waits on (a decoupled model's responses, metric updates, log lines) may be posted instead of sent:
a writer thread writes everything posted since its last write in one go, so a generator that answers 32 streams
in one step costs one write and one wake-up of the server's reader, not 32 (see `Channel.post`).
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import mmap
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from engine.config.datatypes import numpy_dtype, wire_type_of

log = logging.getLogger("infera.engine")

_LENGTH = struct.Struct("<I")
_READ_SIZE = 1 << 16

try:  # orjson where the interpreter has it (a model's own environment may not): headers are on every request
    import orjson

    _dumps = orjson.dumps
    _loads = orjson.loads
except ImportError:  # pragma: no cover - the server's own environment has orjson

    def _dumps(header: dict[str, Any]) -> bytes:
        return json.dumps(header, separators=(",", ":")).encode()

    _loads = json.loads
MAX_HEADER_BYTES = 64 << 20
INITIAL_REGION_BYTES = 1 << 20
MAX_POSTED_BYTES = 4 << 20  # a poster waits while this much is unwritten (the reader is behind): backpressure
_ALIGN = 64


class ChannelClosed(Exception):
    """The other side went away (it exited, crashed or closed the link)."""


class Region:
    """A shared memory file both processes map; the writer grows it, the reader follows."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None
        self.size = 0  # bytes mapped here (the file may have grown since)

    @classmethod
    def create(cls, name: str, size: int = INITIAL_REGION_BYTES) -> Region:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return cls(fd)

    def view(self, end: int) -> memoryview:
        """The region mapped at least up to `end` (remapped when the writer grew it)."""
        if end > self.size or self._view is None:
            size = os.fstat(self.fd).st_size
            if end > size:
                raise ChannelClosed(f"a tensor ends at byte {end}, past the shared region's {size} bytes")
            self._unmap()
            self._map = mmap.mmap(self.fd, size)
            self._view = memoryview(self._map)
            self.size = size
        return self._view

    def grow(self, end: int) -> None:
        """Make the file hold at least `end` bytes (the writer's side)."""
        if end > self.size:
            size = os.fstat(self.fd).st_size
            if end > size:
                os.ftruncate(self.fd, max(end, size * 2))

    def _unmap(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # an array still looks at it; the mapping goes with the process
                pass
            self._map = None

    def close(self) -> None:
        self._unmap()
        try:
            os.close(self.fd)
        except OSError:
            pass


class Channel:
    """One side of the link: `send` from any thread, `receive` from one reader thread."""

    def __init__(self, sock: socket.socket, outgoing: Region, incoming: Region) -> None:
        self.sock = sock
        self.outgoing = outgoing
        self.incoming = incoming
        self._send_lock = threading.Lock()
        self._used = 0
        self._buffer = bytearray()  # bytes received and not yet parsed
        self._posted: list[bytes] = []  # framed messages posted and not yet written, in order
        self._posted_bytes = 0
        self._posting = threading.Condition(threading.Lock())
        self._writer: threading.Thread | None = None
        self._broken: str | None = None  # why a write failed (posts raise it from then on)
        self._closing = False

    def reset(self) -> None:
        """Start writing tensors at the region's start again (the other side has copied what it was sent)."""
        with self._send_lock:
            self._used = 0

    def send(self, header: dict[str, Any], arrays: list[np.ndarray] | tuple[()] = ()) -> None:
        """A message with its tensors in the shared region, written before this returns (after anything posted)."""
        with self._send_lock:
            if arrays:
                header = dict(header, arrays=[self._write(array) for array in arrays])
            data = _frame(header)
            posted = self._take_posted()  # what was posted before goes first: the other side sees one order
            self._write_all(b"".join(posted) + data if posted else data)

    def post(self, header: dict[str, Any], arrays: list[np.ndarray] | tuple[()] = ()) -> None:
        """Send a message nobody waits on, from any thread, without waiting for the write: the writer thread
        writes it with whatever else was posted meanwhile, after everything posted or sent before it. Tensors
        travel inline. ChannelClosed once a write has failed; waits while MAX_POSTED_BYTES are unwritten."""
        if arrays:
            header = dict(header, inline=[_inline(array) for array in arrays])
        data = _frame(header)
        with self._posting:
            while self._posted_bytes > MAX_POSTED_BYTES and self._broken is None and not self._closing:
                self._posting.wait()
            if self._broken is not None:
                raise ChannelClosed(self._broken)
            self._posted.append(data)
            self._posted_bytes += len(data)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_posted, name="infera-channel-writer", daemon=True)
                self._writer.start()
            self._posting.notify_all()

    def _write_posted(self) -> None:
        """The writer thread: wait for posts, write them together."""
        while True:
            with self._posting:
                while not self._posted and not self._closing:
                    self._posting.wait()
                if not self._posted:
                    return
            with self._send_lock:
                posted = self._take_posted()
                try:
                    if posted:
                        self._write_all(b"".join(posted))
                except ChannelClosed as exc:
                    with self._posting:
                        self._broken = str(exc) or "the link closed"
                        self._posting.notify_all()
                    return

    def _take_posted(self) -> list[bytes]:
        """Everything posted so far (the send lock is held: nothing else writes meanwhile)."""
        with self._posting:
            posted, self._posted = self._posted, []
            if posted:
                self._posted_bytes = 0
                self._posting.notify_all()
            return posted

    def _write_all(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None

    def receive(self) -> tuple[dict[str, Any], list[np.ndarray]]:
        (length,) = _LENGTH.unpack(self._read_exactly(_LENGTH.size))
        if length > MAX_HEADER_BYTES:
            raise ChannelClosed(f"a message header of {length} bytes is over the limit")
        header = _loads(self._read_exactly(length))
        arrays = [self._read(descriptor) for descriptor in header.pop("arrays", [])]
        arrays += [_from_inline(descriptor) for descriptor in header.pop("inline", [])]
        return header, arrays

    def holds_message(self) -> bool:
        """Whether a whole message already sits in the receive buffer (read with an earlier one)."""
        buffer = self._buffer
        if len(buffer) < _LENGTH.size:
            return False
        (length,) = _LENGTH.unpack_from(buffer)
        return len(buffer) >= _LENGTH.size + length

    def readable(self, timeout: float | None) -> bool:
        """Whether a message (or the end of the link) can be read within `timeout` seconds (None: wait)."""
        if self._buffer:
            return True
        try:
            ready, _, _ = select.select([self.sock], [], [], timeout)
        except (OSError, ValueError):
            return True  # a closed socket: the read that follows reports it
        return bool(ready)

    def close(self) -> None:
        with self._posting:
            self._closing = True
            self._posting.notify_all()
        try:
            self.sock.close()
        finally:
            self.outgoing.close()
            self.incoming.close()

    def _read_exactly(self, count: int) -> bytes:
        """`count` bytes, read through a buffer: one recv usually brings a whole message, often more."""
        buffer = self._buffer
        while len(buffer) < count:
            try:
                chunk = self.sock.recv(max(_READ_SIZE, count - len(buffer)))
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if not chunk:
                raise ChannelClosed("the other side closed the link")
            buffer += chunk
        data = bytes(buffer[:count])
        del buffer[:count]
        return data

    def _write(self, array: np.ndarray) -> dict[str, Any]:
        wire = wire_type_of(array)
        payload = _bytes_payload(array) if wire == "BYTES" else np.ascontiguousarray(array)
        nbytes = len(payload) if wire == "BYTES" else payload.nbytes
        offset = self._used
        end = offset + nbytes
        self.outgoing.grow(end)
        view = self.outgoing.view(end)
        if wire == "BYTES":
            view[offset:end] = payload
        else:
            view[offset:end] = payload.reshape(-1).view(np.uint8)
        self._used = (end + _ALIGN - 1) // _ALIGN * _ALIGN
        return {"dtype": wire, "shape": list(array.shape), "offset": offset, "nbytes": nbytes}

    def _read(self, descriptor: dict[str, Any]) -> np.ndarray:
        offset, nbytes = int(descriptor["offset"]), int(descriptor["nbytes"])
        shape = [int(d) for d in descriptor["shape"]]
        view = self.incoming.view(offset + nbytes)
        if descriptor["dtype"] == "BYTES":
            return _bytes_array(bytes(view[offset : offset + nbytes]), shape)
        dtype = numpy_dtype(descriptor["dtype"])
        count = nbytes // dtype.itemsize
        return np.frombuffer(view, dtype=dtype, count=count, offset=offset).reshape(shape).copy()


def _frame(header: dict[str, Any]) -> bytes:
    data = _dumps(header)
    return _LENGTH.pack(len(data)) + data


def _inline(array: np.ndarray) -> dict[str, Any]:
    wire = wire_type_of(array)
    payload = _bytes_payload(array) if wire == "BYTES" else np.ascontiguousarray(array).tobytes()
    return {"dtype": wire, "shape": list(array.shape), "data": base64.b64encode(payload).decode("ascii")}


def _from_inline(descriptor: dict[str, Any]) -> np.ndarray:
    raw = base64.b64decode(descriptor["data"])
    shape = [int(d) for d in descriptor["shape"]]
    if descriptor["dtype"] == "BYTES":
        return _bytes_array(raw, shape)
    return np.frombuffer(raw, dtype=numpy_dtype(descriptor["dtype"])).reshape(shape).copy()


def _bytes_payload(array: np.ndarray) -> bytes:
    """BYTES as Triton serialises them: each element's length (4 bytes, little-endian) then its bytes."""
    parts = []
    for item in array.reshape(-1):
        value = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(_LENGTH.pack(len(value)))
        parts.append(value)
    return b"".join(parts)


def _bytes_array(raw: bytes, shape: list[int]) -> np.ndarray:
    items = []
    position = 0
    while position < len(raw):
        (length,) = _LENGTH.unpack_from(raw, position)
        position += _LENGTH.size
        items.append(raw[position : position + length])
        position += length
    return np.array(items, dtype=object).reshape(shape)


Message = tuple[dict[str, Any], list[np.ndarray]]


class Exchange:
    """Questions and answers over one channel. Whoever waits for an answer reads the channel meanwhile (handling
    what else arrives), so an answer reaches its asker without a hop through another thread; when nobody is
    asking, `serve` reads. Messages that are not answers go to `handle`.

    `in_order`: `serve` also hands a message to `handle` before it lets another thread read, so messages are
    handled in the order they came whichever thread reads them (the server's side: a stream's responses must
    reach it in order, and its handler never waits on the link). Without it `serve` hands messages over outside
    the read lock (the stub's side: its handler runs model code, which may ask over the same link)."""

    def __init__(
        self,
        channel: Channel,
        handle: Callable[[dict[str, Any], list[np.ndarray]], None],
        *,
        in_order: bool = False,
    ) -> None:
        self.channel = channel
        self.handle = handle
        self.in_order = in_order
        self._read_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._answers: dict[int, deque[Message]] = {}  # answers that came and were not read yet, per question
        self._answered = threading.Condition(threading.Lock())
        self.closed: str | None = None  # why the link ended, once it has

    def ask(
        self, header: dict[str, Any], arrays: list[np.ndarray] | tuple[()] = (), timeout: float | None = None
    ) -> Message:
        """Send a question and read until its answer arrives; ChannelClosed or TimeoutError otherwise."""
        number = self.open(header, arrays)
        try:
            return self.next_answer(number, timeout)
        finally:
            self.forget(number)

    def open(self, header: dict[str, Any], arrays: list[np.ndarray] | tuple[()] = ()) -> int:
        """Send a question that may get several answers (a BLS call to a decoupled model); its number, to read
        them with `next_answer` and to `forget` it after the last."""
        number = next(self._ids)
        with self._answered:
            self._answers[number] = deque()
        try:
            self.channel.send(dict(header, id=number), arrays)
        except BaseException:
            self.forget(number)
            raise
        return number

    def next_answer(self, number: int, timeout: float | None = None) -> Message:
        """The next answer to question `number`, reading the channel until it arrives; ChannelClosed or TimeoutError
        otherwise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._answered:
                answers = self._answers[number]
                if answers:
                    return answers.popleft()
                if self.closed is not None:
                    raise ChannelClosed(self.closed)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            if self._read_lock.acquire(timeout=-1 if left is None else left):
                try:
                    self._read_until(number, deadline)
                finally:
                    self._read_lock.release()

    def forget(self, number: int) -> None:
        """Stop keeping answers to question `number` (any still to come are dropped)."""
        with self._answered:
            self._answers.pop(number, None)

    def _read_until(self, number: int, deadline: float | None) -> None:
        """Holding the read lock: read messages until `number` is answered, the deadline passes or the link ends.

        Messages that came in the same read as the answer are handled before returning: the serving thread waits
        on the socket, and would not see what is already buffered (a decoupled model's responses, say)."""
        while True:
            with self._answered:
                answered = bool(self._answers.get(number)) or self.closed is not None
            if answered:
                while self.closed is None and self.channel.holds_message():
                    message = self._receive()
                    if message is not None:
                        self._dispatch(message)
                return
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not self.channel.readable(left):
                return  # the deadline passed: ask() raises
            message = self._receive()
            if message is not None:
                self._dispatch(message)

    def serve(self) -> None:
        """Read while nobody asks, until the link ends (then `closed` says why and every asker is told)."""
        while self.closed is None:
            self.channel.readable(None)
            with self._read_lock:
                message = self._receive() if self.closed is None and self.channel.readable(0) else None
                if message is not None and self.in_order:
                    self._dispatch(message)
                    continue
            if message is not None:
                self._dispatch(message)

    def _dispatch(self, message: Message) -> None:
        """Handle a message the other side sent on its own; one that cannot be handled (model code may write
        anything on its link) is logged and dropped, and the link goes on serving."""
        try:
            self.handle(*message)
        except Exception:
            log.warning(
                "dropped a message from a model stub that could not be handled: %.200r", message[0], exc_info=True
            )

    def _receive(self) -> Message | None:
        """One message: an answer is filed for its asker (None is returned), anything else is returned."""
        try:
            header, arrays = self.channel.receive()
        except ChannelClosed as exc:
            with self._answered:
                self.closed = self.closed or str(exc) or "the link closed"
            return None
        number = header.get("answer")
        if number is not None:
            with self._answered:
                if number in self._answers:
                    self._answers[number].append((header, arrays))
            return None
        return header, arrays

    def answer(
        self, question: dict[str, Any], header: dict[str, Any], arrays: list[np.ndarray] | tuple[()] = ()
    ) -> None:
        """Answer a question the other side asked."""
        self.channel.send(dict(header, answer=question["id"]), arrays)
