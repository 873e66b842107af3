"""Server paths out of text shown to console users (console/server_paths.py)."""

from __future__ import annotations

from pathlib import Path

from console.server_paths import shown, without_paths

STORE = Path("/srv/infera/var/models")
VAR = Path("/srv/infera/var")


def test_it_makes_paths_in_the_model_store_relative_to_it():
    text = "failed to load /srv/infera/var/models/simple/1/model.onnx: bad"
    assert without_paths(text, (STORE, VAR)) == "failed to load simple/1/model.onnx: bad"
    assert without_paths("key in /srv/infera/var/secret_key", (STORE, VAR)) == "key in secret_key"


def test_it_cuts_other_system_paths_to_their_last_part():
    assert without_paths("imported from /home/ada/models") == "imported from …/models"
    assert without_paths('File "/tmp/pytest-1/x/model.py", line 3') == 'File "…/model.py", line 3'
    assert without_paths("in /usr/lib/python3/site.py:12") == "in …/site.py:12"
    assert without_paths(r"at C:\Users\ada\m.onnx.") == "at …/m.onnx."


def test_it_leaves_urls_api_paths_and_relative_paths_alone():
    for text in ("see /v2/models/simple/infer", "http://host/home/ada/x", "simple/1/model.onnx", "a/b", ""):
        assert without_paths(text) == text


def test_it_reads_this_servers_store_and_var_folder(settings, tmp_path):
    settings.INFERA = settings.INFERA.replace(model_store=tmp_path / "store", var_dir=tmp_path)
    assert shown(f"cannot open {tmp_path}/store/m/1/model.pt") == "cannot open m/1/model.pt"
