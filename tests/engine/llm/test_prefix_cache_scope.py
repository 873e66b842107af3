"""The prefix cache kept per caller (no caller can time another's cached prompt), shared when the config says so,
and separated further by a request's `cache_salt`, on a real server with two callers' tokens."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import pytest_asyncio

from engine.serving.admission import ANONYMOUS, Principal
from tests.engine.llm.served import serving
from tests.engine.llm.test_llm_backend import CONFIG

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROMPT = "the scheduler plans each step on an explicit clock and prefix caching shares the blocks"
CALLERS = {
    b"Bearer alice": Principal("alice", user_id=1, token_id=11),
    b"Bearer bob": Principal("bob", user_id=2, token_id=12),
}


async def authenticate(scope) -> Principal:
    headers = dict(scope.get("headers", ()))
    return CALLERS.get(headers.get(b"authorization", b""), ANONYMOUS)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(tiny_llama_folder: Path, tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("prefix-scope-repo")
    scopes = {"tiny": "", "shared": "shared", "global": "global"}
    for name, scope in scopes.items():
        (repo / name).mkdir()
        config = CONFIG.replace('name: "tiny"', f'name: "{name}"')
        if scope:
            config += f'parameters {{ key: "prefix_cache_scope" value: {{ string_value: "{scope}" }} }}\n'
        (repo / name / "config.pbtxt").write_text(config)
        shutil.copytree(tiny_llama_folder, repo / name / "1")
    async with serving(repo, authenticate=authenticate) as served:
        yield served


async def cached(served, caller: str, model: str = "tiny", **fields: object) -> int:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 2} | fields
    answer = await served.client.post("/v1/completions", json=body, headers={"authorization": f"Bearer {caller}"})
    assert answer.status_code == 200, answer.text
    return answer.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


async def test_it_keeps_each_callers_cached_prefix_to_itself(served):
    assert await cached(served, "alice") == 0
    assert await cached(served, "bob") == 0
    assert await cached(served, "bob") > 0
    assert await cached(served, "alice") > 0


async def test_it_shares_the_cache_across_callers_when_the_scope_is_shared(served):
    assert await cached(served, "alice", "shared") == 0
    assert await cached(served, "bob", "shared") > 0


async def test_it_separates_cache_salts_within_one_caller(served):
    assert await cached(served, "alice", cache_salt="one") == 0  # alice's own cache holds it, not under this salt
    assert await cached(served, "alice", cache_salt="two") == 0
    assert await cached(served, "alice", cache_salt="one") > 0
    generate = {"text_input": PROMPT, "max_tokens": 2, "cache_salt": "three"}
    first = await served.client.post("/v2/models/tiny/generate", json=generate, headers={"authorization": "Bearer bob"})
    again = await served.client.post("/v2/models/tiny/generate", json=generate, headers={"authorization": "Bearer bob"})
    assert first.json()["cached_tokens"] == 0 and again.json()["cached_tokens"] > 0


async def test_it_refuses_a_bad_cache_salt_and_a_bad_scope_naming_them(served):
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 2, "cache_salt": ""}
    refused = await served.client.post("/v1/completions", json=body, headers={"authorization": "Bearer alice"})
    assert refused.status_code == 400 and "cache_salt" in refused.json()["error"]["message"]
    reason = served.server.status("global").versions[1].reason
    assert "prefix_cache_scope" in reason and "'global'" in reason
