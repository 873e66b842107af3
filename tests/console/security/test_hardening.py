"""The smaller findings of the security review, each reproduced: sign-in, logs, headers, names, store leftovers."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
from django.test import Client

from console.accounts.log_masking import QuietClientErrors
from console.accounts.roles import Role
from console.hosting.access_log import MaskedAccessLog, QueryMaskingFilter, mask_query
from console.hosting.websocket_origin import origin_allowed
from console.registry.services import model_actions, new_versions, refusals
from console.registry.store import ModelStore
from console.settings_parts import database_settings
from tests.console.accounts.conftest import PASSWORD, make_user


@pytest.mark.django_db
def test_an_inference_account_cannot_sign_in_with_a_password():
    make_user("camera", Role.INFERENCE)
    answer = Client().post("/accounts/login/", {"username": "camera", "password": PASSWORD})
    assert answer.status_code == 200 and 'role="alert"' in answer.content.decode()


@pytest.mark.django_db
def test_the_password_is_hashed_off_the_thread_every_sync_view_shares(monkeypatch):
    from console.accounts import login_view

    threads: dict[str, int] = {}
    hash_password, read_hash = login_view.password_matches, login_view.stored_password

    def hashing(*args):
        threads["hash"] = threading.get_ident()
        return hash_password(*args)

    def reading(*args):
        threads["read"] = threading.get_ident()
        return read_hash(*args)

    monkeypatch.setattr(login_view, "password_matches", hashing)
    monkeypatch.setattr(login_view, "stored_password", reading)
    make_user("vera", Role.VIEWER)
    assert Client().post("/accounts/login/", {"username": "vera", "password": PASSWORD}).status_code == 302
    assert threads["hash"] != threads["read"]


def test_credentials_in_query_strings_never_reach_an_access_log():
    line = '127.0.0.1:5 - "GET /accounts/reset/?token=s3cr3t&next=/x&password=hunter2 HTTP/1.1" 200'
    assert mask_query(line) == '127.0.0.1:5 - "GET /accounts/reset/?token=***&next=/x&password=*** HTTP/1.1" 200'
    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d', None, None)
    record.args = ("127.0.0.1:5", "GET", "/v2?key=ifr_abcdefghijkl", "1.1", 200)
    QueryMaskingFilter().filter(record)
    assert "abcdefghijkl" not in record.getMessage()

    class Stream:
        written = ""

        def write(self, text: str) -> int:
            self.written += text
            return len(text)

    stream = Stream()
    MaskedAccessLog(stream).write('"GET /models/?api_key=abc123 HTTP/1.1"')  # type: ignore[arg-type]
    assert stream.written == '"GET /models/?api_key=*** HTTP/1.1"'


def test_refused_requests_are_logged_without_a_traceback():
    try:
        raise PermissionError("no")
    except PermissionError as exc:
        record = logging.LogRecord("django.request", logging.WARNING, "", 0, "Forbidden", None, (type(exc), exc, None))
    record.status_code = 403
    assert QuietClientErrors().filter(record) and record.exc_info is None
    crash = logging.LogRecord("django.request", logging.ERROR, "", 0, "boom", None, (ValueError, ValueError(), None))
    crash.status_code = 500
    assert QuietClientErrors().filter(crash) and crash.exc_info is not None


@pytest.mark.django_db
def test_pages_allow_no_inline_script_and_no_eval():
    policy = Client().get("/accounts/login/")["Content-Security-Policy"]
    script = next(part for part in policy.split("; ") if part.startswith("script-src"))
    assert script == "script-src 'self'"


@pytest.mark.django_db
def test_the_api_map_needs_a_sign_in(viewer):
    anonymous = Client()
    assert anonymous.get("/api/schema/").status_code in (401, 403)
    assert anonymous.get("/api/docs/").status_code in (401, 403)
    signed_in = Client()
    signed_in.force_login(viewer)
    assert signed_in.get("/api/schema/").status_code == 200
    page = signed_in.get("/api/docs/")
    assert page.status_code == 200 and b"<script>" not in page.content  # the start-up script is a file of its own


def test_a_dashboard_socket_must_come_from_this_origin_port_included(settings):
    assert origin_allowed("http://127.0.0.1:8000", "127.0.0.1:8000", secure=False)
    assert not origin_allowed("http://127.0.0.1:9999", "127.0.0.1:8000", secure=False)
    assert not origin_allowed("https://127.0.0.1:8000", "127.0.0.1:8000", secure=False)
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example.com"]
    assert origin_allowed("https://console.example.com", "127.0.0.1:8000", secure=False)


@pytest.mark.django_db
def test_names_one_filesystem_would_confuse_are_refused(operator):
    model_actions.register_model(operator, "simple")
    with pytest.raises(refusals.Conflict, match="only in case"):
        model_actions.register_model(operator, "Simple")
    for name in ("con", "NUL", "a."):
        with pytest.raises(Exception, match="model name|device name|may not end"):
            model_actions.register_model(operator, name)


def test_the_database_file_is_private(tmp_path):
    database_settings(None, default_sqlite=tmp_path / "var" / "db.sqlite3")
    assert (tmp_path / "var" / "db.sqlite3").stat().st_mode & 0o777 == 0o600


def test_staging_left_by_a_crash_is_swept_and_live_uploads_are_not(tmp_path):
    store = ModelStore(tmp_path)
    live = store.new_staging()
    host = live.name.split(".")[0]
    crashed = tmp_path / ".staging" / f"{host}.{2**22 + 7}.abc"  # a pid no process has
    crashed.mkdir()
    elsewhere = tmp_path / ".staging" / "other-host.123.def"  # another replica's upload in progress
    elsewhere.mkdir()
    ancient = tmp_path / ".trash" / "other-host.9.old"
    ancient.mkdir(parents=True)
    os.utime(ancient, (0, 0))
    assert sorted(store.sweep()) == [".staging/" + crashed.name, ".trash/" + ancient.name]
    assert live.is_dir() and elsewhere.is_dir()


@pytest.mark.django_db
def test_a_failed_upload_shows_no_server_path(settings, tmp_path, operator):
    from tests.console.registry.conftest import model_file

    settings.INFERA = settings.INFERA.replace(model_store=tmp_path / "store")
    model = model_actions.register_model(operator, "simple")
    with pytest.raises(refusals.RegistryError) as refused:
        new_versions.add_version(operator, model, model_file(b"junk", "model.onnx"))
    assert str(tmp_path) not in refused.value.message and "model.onnx" in refused.value.message
    assert not Path(str(tmp_path)).joinpath("store", ".staging").exists() or not any(
        (tmp_path / "store" / ".staging").iterdir()
    )
