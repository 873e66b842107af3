"""LocalPeerLayer: group messages shared by the processes that joined one folder, over real Unix datagram sockets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import msgpack
import pytest

from console.peers.layer import (
    MAX_MESSAGE,
    OUTBOX_LIMIT,
    LocalPeerLayer,
    decode,
    encode,
    process_group,
    socket_folder,
)

GROUP = "registry"


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[LocalPeerLayer, LocalPeerLayer]]:
    """Two workers' layers (in one process here, each with its own socket) that joined the same folder."""
    first, second = LocalPeerLayer(str(tmp_path / "peers")), LocalPeerLayer(str(tmp_path / "peers"))
    await first.join("host-w0")
    await second.join("host-w1")
    folder = first.endpoint.folder  # under the temporary directory when tmp_path is too long for socket paths
    try:
        yield first, second
    finally:
        await first.leave()
        await second.leave()
        for leftover in folder.glob("stale-*.sock"):
            leftover.unlink()
        folder.rmdir()  # every worker left: its socket went with it


async def member(layer: LocalPeerLayer, group: str = GROUP) -> str:
    channel = await layer.new_channel("test.")
    await layer.group_add(group, channel)
    return channel


async def test_it_delivers_a_group_message_here_and_in_every_other_worker(pair):
    first, second = pair
    here, there = await member(first), await member(second)
    await first.group_send(GROUP, {"type": "registry.changed", "model": "simple"})
    assert await asyncio.wait_for(first.receive(here), 5) == {"type": "registry.changed", "model": "simple"}
    assert await asyncio.wait_for(second.receive(there), 5) == {"type": "registry.changed", "model": "simple"}
    # what arrived from a peer is not sent back out: one message, once
    await asyncio.sleep(0)
    assert second.endpoint.received == 1 and first.endpoint.received == 0


async def test_it_keeps_process_groups_in_their_process(pair):
    first, second = pair
    local = process_group("metrics")
    there = await member(second, local)
    await member(first, local)
    await first.group_send(local, {"type": "metrics.snapshot", "text": "{}"})
    await first.group_send(GROUP, {"type": "registry.changed", "model": "after"})
    await member(second)  # joins the shared group too late for that message: nothing arrives for it either
    await asyncio.sleep(0.2)  # the datagram has had time to arrive; none was sent for the process group
    assert second.endpoint.received == 1
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(second.receive(there), 0.2)


async def test_it_acts_as_the_in_memory_layer_until_joined(tmp_path: Path):
    alone = LocalPeerLayer(str(tmp_path / "peers"))
    channel = await member(alone)
    await alone.group_send(GROUP, {"type": "registry.changed"})
    assert await alone.receive(channel) == {"type": "registry.changed"}
    assert not (tmp_path / "peers").exists()


@contextlib.asynccontextmanager
async def beside_a_quiet_peer(tmp_path: Path) -> AsyncIterator[tuple[LocalPeerLayer, socket.socket]]:
    """A worker's layer and a peer's socket in its folder that reads nothing unless the test does; both removed
    afterwards, and the folder with them."""
    layer = LocalPeerLayer(str(tmp_path / "peers"))
    await layer.join("host-w0")
    folder = layer.endpoint.folder
    quiet = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    quiet.bind(str(folder / "host-w1.sock"))
    try:
        yield layer, quiet
    finally:
        quiet.close()
        (folder / "host-w1.sock").unlink()
        await layer.leave()
        folder.rmdir()


async def test_it_queues_for_a_peer_whose_queue_is_full_and_sends_in_order(tmp_path: Path):
    async with beside_a_quiet_peer(tmp_path) as (layer, slow):  # a worker that is not reading right now
        count = 40  # past the kernel's queue of a Unix datagram socket (net.unix.max_dgram_qlen, 10 by default)
        for index in range(count):
            await layer.group_send(GROUP, {"type": "registry.changed", "n": index})
        link = layer.endpoint.links[layer.endpoint.folder / "host-w1.sock"]
        assert link.outbox  # some wait in the outbox, none was lost
        slow.setblocking(False)
        received: list[int] = []
        loop = asyncio.get_running_loop()
        while len(received) < count:
            datagram = await asyncio.wait_for(loop.sock_recv(slow, 1 << 20), 5)
            received.append(decode(datagram)[1]["n"])
        assert received == list(range(count))
        assert link.dropped == 0


async def test_it_drops_the_oldest_beyond_the_outbox_limit(tmp_path: Path):
    async with beside_a_quiet_peer(tmp_path) as (layer, _):
        for index in range(OUTBOX_LIMIT + 50):
            await layer.group_send(GROUP, {"type": "registry.changed", "n": index})
        link = layer.endpoint.links[layer.endpoint.folder / "host-w1.sock"]
        assert len(link.outbox) == OUTBOX_LIMIT and link.dropped > 0
        assert decode(link.outbox[-1])[1]["n"] == OUTBOX_LIMIT + 49


async def test_it_skips_a_peer_that_went_away_and_reaches_it_again_once_back(pair, tmp_path: Path):
    first, second = pair
    await second.leave()  # the worker stops: its socket is gone
    await first.group_send(GROUP, {"type": "registry.changed", "n": 1})
    gone = first.endpoint.folder / "stale-w9.sock"  # one killed without cleaning up: a file nobody reads
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(gone))
    dead.close()
    await first.group_send(GROUP, {"type": "registry.changed", "n": 2})
    await second.join("host-w1")  # restarted under the same name
    there = await member(second)
    await first.group_send(GROUP, {"type": "registry.changed", "n": 3})
    assert (await asyncio.wait_for(second.receive(there), 5))["n"] == 3


async def test_it_keeps_its_folder_private(pair):
    assert pair[0].endpoint.folder.stat().st_mode & 0o777 == 0o700
    with tempfile.TemporaryDirectory(prefix="peers") as shared:  # a short path: used as it is
        os.chmod(shared, 0o755)
        with pytest.raises(PermissionError, match="private"):
            await LocalPeerLayer(shared).join("x")


def test_it_round_trips_messages_small_and_large():
    small = {"type": "registry.changed", "model": "simple"}
    large = {"type": "cluster.snapshot", "text": "x" * 100_000}
    assert decode(encode(GROUP, small)) == (GROUP, small)
    assert len(encode(GROUP, large)) < 10_000  # compressed
    assert decode(encode(GROUP, large)) == (GROUP, large)
    with pytest.raises(ValueError, match="not a peer message"):
        decode(b"?junk")


def test_it_moves_sockets_out_of_a_folder_too_deep_for_unix_socket_paths():
    assert socket_folder(Path("/srv/infera/var/peers")) == Path("/srv/infera/var/peers")
    deep = Path("/srv") / ("d" * 90) / "peers"
    moved = socket_folder(deep)
    assert moved != deep and len(str(moved)) < 60
    assert socket_folder(deep) == moved  # the same folder for every worker of that var/


async def test_it_refuses_hostile_datagrams_before_any_group_hears_them(pair):
    first, second = pair
    local, shared = await member(second, process_group("metrics")), await member(second)
    hostile = [
        encode(process_group("metrics"), {"type": "metrics.snapshot", "text": "forged"}),  # a process group
        encode("not a group!", {"type": "registry.changed"}),  # a name Channels refuses
        encode(GROUP, {"model": "simple"}),  # a message without a type
        b"m" + msgpack.packb(["registry", {"type": "x"}, "extra"]),
        b"m" + msgpack.packb("registry"),
        b"z" + zlib.compress(msgpack.packb([GROUP, {"type": "x", "text": "0" * (MAX_MESSAGE + 1)}])),  # inflates past
    ]
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        for datagram in hostile:
            sender.sendto(datagram, str(second.endpoint.path))
    finally:
        sender.close()
    await first.group_send(GROUP, {"type": "registry.changed", "model": "after"})
    assert (await asyncio.wait_for(second.receive(shared), 5))["model"] == "after"  # the worker goes on
    assert second.endpoint.unreadable == len(hostile) and second.endpoint.received == 1
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(second.receive(local), 0.2)
