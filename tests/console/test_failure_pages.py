"""What a page or an API call answers when the database is down or the disk is full, and what it leaves alone."""

from __future__ import annotations

import errno
import json

import pytest
from django.db import IntegrityError, OperationalError
from django.test import RequestFactory

from console.failure_pages import FailurePagesMiddleware, failure_response


@pytest.fixture
def requests() -> RequestFactory:
    return RequestFactory()


def test_it_answers_an_api_call_during_a_database_outage_with_503_json(requests):
    answer = failure_response(requests.get("/api/models/"), OperationalError("connection refused"))
    assert answer.status_code == 503 and answer["Retry-After"] == "5"
    assert json.loads(answer.content)["code"] == "database_unavailable"


def test_it_answers_a_page_during_a_database_outage_with_a_503_page(requests):
    answer = failure_response(requests.get("/models/"), OperationalError("database is locked"))
    page = answer.content.decode()
    assert answer.status_code == 503 and "<h1>Database unavailable</h1>" in page and "keeps serving" in page


def test_it_answers_a_full_disk_with_507(requests):
    answer = failure_response(requests.post("/api/models/m/versions/"), OSError(errno.ENOSPC, "No space left"))
    assert answer.status_code == 507 and json.loads(answer.content)["code"] == "insufficient_storage"


@pytest.mark.parametrize("error", [IntegrityError("duplicate"), OSError(errno.EACCES, "denied"), ValueError("x")])
def test_it_leaves_other_failures_to_the_usual_500(requests, error):
    assert failure_response(requests.get("/models/"), error) is None


def test_the_middleware_logs_an_outage_once_and_its_end(requests, caplog):
    middleware = FailurePagesMiddleware(lambda request: type("Answer", (), {"status_code": 200})())
    with caplog.at_level("INFO", logger="console.outages"):
        for _ in range(3):
            assert middleware.process_exception(requests.get("/models/"), OperationalError("gone")).status_code == 503
        middleware(requests.get("/models/"))
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2 and "is unavailable" in messages[0] and "(3 failed attempts)" in messages[1]
