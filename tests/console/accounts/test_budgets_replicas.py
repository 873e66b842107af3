"""Token budgets across two replicas (two `manage.py serve` on one database, one store and one Redis): a budget an
admin sets through one replica's API holds on the other at once (its cached verdict on the token is dropped by the
change message), and a token that spends its minute's tokens on one replica gets 429 on the other within the same
second (the reservation is counted in Redis before the first answer is sent); /metrics counts the usage by user."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.conftest import manage_command, serve_process
from tests.engine.decoupled_models import TEXT_ECHO, TEXT_ECHO_CONFIG

pytestmark = [pytest.mark.server, pytest.mark.slow]  # two servers started: over a minute on two cores

CONVERGE_S = 60.0  # a bound on waits for a change message or a load: a lost one fails the test, it never decides it


def echo_repository(folder: Path) -> Path:
    (folder / "text_echo" / "1").mkdir(parents=True)
    (folder / "text_echo" / "config.pbtxt").write_text(TEXT_ECHO_CONFIG)
    (folder / "text_echo" / "1" / "model.py").write_text(TEXT_ECHO)
    return folder


def wait_until_ready(base_url: str, key: str) -> None:
    """Until the replica serves text_echo (the import's change message reached it), bounded by CONVERGE_S."""
    deadline = time.monotonic() + CONVERGE_S
    headers = {"Authorization": f"Bearer {key}"}
    request = urllib.request.Request(f"{base_url}/v2/models/text_echo/ready", headers=headers)
    while True:
        try:
            with urllib.request.urlopen(request, timeout=15) as answer:
                if answer.status == 200:
                    return
        except urllib.error.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{base_url} never served text_echo"
        time.sleep(0.1)


def put_budget(base_url: str, admin_key: str, token_id: int, limits: dict) -> dict:
    request = urllib.request.Request(
        f"{base_url}/api/tokens/{token_id}/budget/",
        data=json.dumps(limits).encode(),
        method="PUT",
        headers={"Authorization": f"Token {admin_key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=15) as answer:
        return json.loads(answer.read())


def token_id_of(base_url: str, key: str) -> int:
    request = urllib.request.Request(f"{base_url}/api/tokens/", headers={"Authorization": f"Token {key}"})
    with urllib.request.urlopen(request, timeout=15) as answer:
        (row,) = json.loads(answer.read())
        return row["id"]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, private_redis):
    var_dir = tmp_path_factory.mktemp("budget-replicas") / "var"
    env = {
        "REDIS_URL": private_redis.url,
        "INFERA_SECRET_KEY": "budget-replicas-secret-key-for-two-processes",
        "INFERA_DISABLE_NVML": "1",
        "INFERA_INFERENCE_AUTH": "token",
        "INFERA_TOKEN_CHECK_SECONDS": "3600",  # only the change message refreshes a replica's verdict on a token
        "INFERA_SECURE_COOKIES": "0",
    }
    with serve_process(var_dir, "--no-seed", env=env | {"INFERA_REPLICA_NAME": "one"}) as one:
        with serve_process(var_dir, "--no-seed", env=env | {"INFERA_REPLICA_NAME": "two"}) as two:
            manage = manage_command(var_dir, env)
            manage("import_repository", str(echo_repository(tmp_path_factory.mktemp("budget-repo"))))
            manage("create_user", "tenant", "--role", "viewer")  # a console role: it lists its own tokens
            admin_key, tenant_key = manage("issue_token", "admin"), manage("issue_token", "tenant")
            for server in (one, two):
                wait_until_ready(server.base_url, tenant_key)
            yield one, two, admin_key, tenant_key


def test_a_token_over_its_budget_on_one_replica_gets_429_on_the_other_within_the_second(replicas):
    one, two, admin_key, tenant_key = replicas
    clients = [
        openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=tenant_key, max_retries=0, timeout=30)
        for server in (one, two)
    ]
    first, other = clients
    other.completions.create(model="text_echo", prompt="hi", max_tokens=4)  # replica two caches the token's verdict
    limits = {"tokens_per_minute": 8, "max_tokens": 8}
    assert put_budget(one.base_url, admin_key, token_id_of(one.base_url, tenant_key), limits) == limits | {
        "concurrent_streams": None
    }
    deadline = time.monotonic() + CONVERGE_S
    while True:  # replica two holds the new budget once it heard the change: a max_tokens above 8 is then a 400
        try:
            other.completions.create(model="text_echo", prompt="hi", max_tokens=9)
        except openai.BadRequestError as refused:
            assert "at most 8" in refused.body["message"]
            break
        assert time.monotonic() < deadline, "replica two never applied the budget set through replica one"
    # reserves the minute's 8, then counts what it used ("echo: hi": 8 and the prompt's 2) before it answers
    spent = first.completions.create(model="text_echo", prompt="hi", max_tokens=8)
    answered = time.monotonic()
    with pytest.raises(openai.RateLimitError) as refused:
        other.completions.create(model="text_echo", prompt="hi", max_tokens=1)
    assert time.monotonic() - answered < 1.0
    assert spent.choices[0].text
    assert refused.value.response.status_code == 429
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert refused.value.response.json()["error"]["code"] == "rate_limit_exceeded"
    with urllib.request.urlopen(f"{one.base_url}/metrics", timeout=15) as answer:
        lines = answer.read().decode().splitlines()
    usage = [line for line in lines if line.startswith("infera_llm_usage_tokens_total")]
    assert any('user="tenant"' in line and 'kind="completion"' in line for line in usage), usage
