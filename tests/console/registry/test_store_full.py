"""A full disk under the model store: uploads and /v2 loads answer 507 saying so, and nothing is half-stored.

The store is a real 1 MiB tmpfs, so the writes really fail with ENOSPC (mounting needs root, as CI runs).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion
from console.registry.v2_hooks import RegistryRepositoryControl
from tests.console.accounts.conftest import make_user
from tests.console.registry.conftest import model_file, upload, zip_of
from tests.console.registry.engine_helpers import reconciler_for

STORE_BYTES = 1024 * 1024
TOO_BIG = os.urandom(2 * STORE_BYTES)  # random, so a zip of it does not shrink below the store's size


@pytest.fixture
def store(settings, tmp_path: Path) -> Iterator[Path]:
    """The model store on a 1 MiB tmpfs of its own."""
    path = tmp_path / "store"
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={STORE_BYTES}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs: {mounted.stderr}")
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    settings.INFERA = settings.INFERA.replace(model_store=path)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def staging_is_empty(store: Path) -> bool:
    staging = store / ".staging"
    return not staging.exists() or not any(staging.iterdir())


@pytest.mark.django_db
@pytest.mark.parametrize(
    "sent", [model_file(TOO_BIG), model_file(zip_of({"1/model.onnx": TOO_BIG}), "model.zip")], ids=["file", "zip"]
)
def test_it_answers_507_and_keeps_nothing_when_the_store_is_full(as_operator, simple_onnx, store, sent):
    assert as_operator.post("/api/models/", {"name": "simple"}, format="json").status_code == 201
    assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    events = AuditEvent.objects.count()
    answer = upload(as_operator, "simple", sent)
    assert answer.status_code == 507, answer.content
    assert "the model store has no room left (No space left on device)" in answer.json()["detail"]
    assert list(ModelVersion.objects.values_list("number", flat=True)) == [1]
    assert AuditEvent.objects.count() == events
    assert staging_is_empty(store) and sorted(p.name for p in (store / "simple").iterdir()) == ["1", "config.pbtxt"]
    assert (store / "simple" / "1" / "model.onnx").read_bytes() == simple_onnx
    # the store was never left full: the next upload that fits is taken
    assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201


@pytest.mark.django_db(transaction=True)
async def test_a_v2_load_with_files_answers_507_when_the_store_is_full(engine, store, simple_onnx):
    from asgiref.sync import sync_to_async

    from console.accounts.principals import principal_for
    from console.accounts.roles import Role
    from tests.console.registry.engine_helpers import register

    operator = await sync_to_async(make_user)("otto", Role.OPERATOR)
    await register(operator, "simple", [simple_onnx])
    control = RegistryRepositoryControl(reconciler_for(engine))
    files = {PurePosixPath("1/model.onnx"): TOO_BIG}
    with pytest.raises(Exception) as refused:
        await control.load("simple", config=None, files=files, caller=await sync_to_async(principal_for)(operator))
    assert refused.value.status == 507 and "no room left" in str(refused.value)
    assert await ModelVersion.objects.filter(model__name="simple").acount() == 1
    assert staging_is_empty(store)
