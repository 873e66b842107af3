"""Model names and `file:` paths are checked, and paths normalised, before anything touches the disk."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from engine.config.names import check_model_name, normalise_file_path, normalise_files, sent_files
from engine.errors import InvalidArgument


@pytest.mark.parametrize("raw", ["1/model.py/", "/1/model.py", "1//model.py//", "./1/model.py/.", "1/./model.py"])
def test_it_normalises_every_spelling_of_one_file(raw):
    assert normalise_file_path(raw) == PurePosixPath("1/model.py")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("../x", "leaves the model folder"),
        ("1/../../etc/passwd", "leaves the model folder"),
        ("1\\model.py", "uses '\\\\'"),
        ("1/model\x00.py", "control character"),
        ("/", "names no file"),
        ("", "is empty"),
        ("1/" + "a" * 300, "longer than 255 bytes"),
        ("/".join("d" * 10), "folders deep"),
    ],
)
def test_it_refuses_paths_that_escape_or_cannot_be_files(raw, why):
    with pytest.raises(InvalidArgument, match=why):
        normalise_file_path(raw)


def test_it_refuses_two_parameters_that_name_one_file():
    with pytest.raises(InvalidArgument, match="another file parameter names too"):
        normalise_files({"1/model.py": b"a", "1/model.py/": b"b"})


@pytest.mark.parametrize("paths", [["1/model.py", "/1/model.py/x"], ["1/model.py/x/y", "1/model.py"], ["1", "1/m"]])
def test_it_refuses_a_file_that_another_path_needs_as_a_folder(paths):
    with pytest.raises(InvalidArgument, match="to be a folder, but file path"):
        normalise_files(dict.fromkeys(paths, b""))


def test_it_reads_sent_files_as_bytes_or_base64_and_skips_other_parameters():
    parameters = {"config": "{}", "file:1/a": b"\x00raw", "file:/1/b": "aGk=", "unload_dependents": True}
    assert sent_files(parameters) == {"1/a": b"\x00raw", "/1/b": b"hi"}


@pytest.mark.parametrize(
    ("parameters", "why"),
    [
        ({"file:": b""}, "'file:' names no file"),
        ({"file:1/a": "not base64!"}, "'file:1/a' is not valid base64"),
        ({"file:1/a": 7}, "'file:1/a' must carry the file's contents"),
    ],
)
def test_it_refuses_sent_files_it_cannot_read(parameters, why):
    with pytest.raises(InvalidArgument, match=why):
        sent_files(parameters)


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "a/b", "", "con", "NUL", "com1.onnx", "a.", "x" * 129, "-x"])
def test_it_refuses_names_a_filesystem_would_misread(name):
    with pytest.raises(InvalidArgument, match="is invalid"):
        check_model_name(name)


@pytest.mark.parametrize("name", ["simple", "TestModel123", "_private", "resnet-50.v2", "x" * 128, "console"])
def test_it_accepts_names_triton_users_give(name):
    assert check_model_name(name) == name
