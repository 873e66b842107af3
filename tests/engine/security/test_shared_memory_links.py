"""A shared memory key must name a shared memory object, never a link planted in /dev/shm to a file elsewhere."""

from __future__ import annotations

import os
import uuid

import pytest

from engine.errors import InvalidArgument
from engine.protocol.shared_memory import SHM_ROOT, SharedMemoryRegistry


@pytest.fixture
def planted_link(tmp_path):
    """A file this process may write (think: its database) and a link to it in /dev/shm, as another user could plant."""
    target = tmp_path / "db.sqlite3"
    target.write_bytes(b"precious rows" + bytes(51))
    link = SHM_ROOT / f"infera_planted_{uuid.uuid4().hex}"
    link.symlink_to(target)
    yield link, target
    link.unlink()


def test_it_refuses_a_key_that_is_a_link(planted_link):
    link, target = planted_link
    registry = SharedMemoryRegistry()
    with pytest.raises(InvalidArgument, match=f"Unable to open shared memory region: '/{link.name}'"):
        registry.register("stolen", f"/{link.name}", 0, 64)
    assert registry.status() == []
    assert target.read_bytes().startswith(b"precious rows")


def test_it_refuses_a_key_that_is_not_a_file(tmp_path):
    folder = SHM_ROOT / f"infera_folder_{uuid.uuid4().hex}"
    folder.mkdir()
    try:
        with pytest.raises(InvalidArgument, match="Unable to open shared memory region"):
            SharedMemoryRegistry().register("folder", f"/{folder.name}", 0, 64)
    finally:
        folder.rmdir()


@pytest.mark.parametrize("key", ["/../etc/passwd", "/a/b", "/", "..", ""])
def test_it_refuses_a_key_that_is_not_one_name(key):
    with pytest.raises(InvalidArgument, match="is not a shared memory key|Unable to open"):
        SharedMemoryRegistry().register("region", key, 0, 64)


def test_it_registers_a_real_object_and_writes_into_it():
    name = f"infera_real_{uuid.uuid4().hex}"
    path = SHM_ROOT / name
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(descriptor, 64)
        registry = SharedMemoryRegistry()
        registry.register("real", f"/{name}", 16, 32)
        registry.get("real", "OUTPUT0").write(0, b"\x01\x02\x03\x04", "OUTPUT0")
        assert path.read_bytes()[16:20] == b"\x01\x02\x03\x04"
        registry.close()
    finally:
        os.close(descriptor)
        path.unlink()
