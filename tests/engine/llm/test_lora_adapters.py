"""LoRA adapters served as models of their own on a loaded llm base (engine/backends/lora.py, engine/llm/adapters.py):
two adapters trained here with peft on the tiny Llama, asked through the openai client on a real server, each
greedy answer equal to peft's own, and equal whether it runs alone or in one batch with the other and the base."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import openai
import pytest
import pytest_asyncio
import torch

from engine.errors import LoadError
from engine.llm.adapters import LoRAAdapter
from tests.engine.llm.served import serving
from tests.engine.llm.test_llm_backend import CONFIG

PROMPT = "the quick brown fox"
MAX_TOKENS = 16
TRAINING = {  # adapter -> the text it learns to say
    "tiny-a": "tokens stream to the client one at a time",
    "tiny-b": "prefix caching shares the blocks of a common prompt",
}
ADAPTER_CONFIG = (
    'name: "{name}"\nbackend: "lora"\nparameters {{ key: "base_model" value: {{ string_value: "tiny" }} }}\n'
)

MAX_TWO_LORAS = 'parameters { key: "max_loras" value: { string_value: "2" } }\n'

pytestmark = pytest.mark.asyncio(loop_scope="module")


def train_adapter(base: Path, text: str, folder: Path, seed: int) -> list[int]:
    """A rank-4 LoRA on the attention and MLP projections, trained a few steps to say `text` after PROMPT; saved
    by peft into `folder`. Returns peft's own greedy continuation of PROMPT (token ids)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    model = LlamaForCausalLM.from_pretrained(base, local_files_only=True, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"])
    tuned = get_peft_model(model, config)
    ids = tokenizer(f"{PROMPT} {text}", return_tensors="pt").input_ids
    optimizer = torch.optim.Adam([p for p in tuned.parameters() if p.requires_grad], lr=0.02)
    for _ in range(30):
        tuned(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    tuned.save_pretrained(folder)
    return greedy(tuned.eval(), tokenizer)


def greedy(model, tokenizer) -> list[int]:
    prompt = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(
            input_ids=prompt, max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=tokenizer.eos_token_id
        )
    tokens = out[0, prompt.shape[1] :].tolist()
    return tokens[: tokens.index(tokenizer.eos_token_id)] if tokenizer.eos_token_id in tokens else tokens


@pytest.fixture(scope="module")
def adapters(tiny_llama_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """name -> (its PEFT folder, peft's greedy answer to PROMPT as text)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_folder, local_files_only=True)
    made = {}
    for seed, (name, text) in enumerate(TRAINING.items()):
        folder = tmp_path_factory.mktemp(name)
        made[name] = (folder, tokenizer.decode(train_adapter(tiny_llama_folder, text, folder, seed)))
    return made


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(tiny_llama_folder: Path, adapters, tmp_path_factory: pytest.TempPathFactory):
    """The tiny base loaded, then each adapter loaded as a model naming it."""
    repo = tmp_path_factory.mktemp("lora-repo")
    (repo / "tiny").mkdir()
    (repo / "tiny" / "config.pbtxt").write_text(CONFIG + MAX_TWO_LORAS)
    shutil.copytree(tiny_llama_folder, repo / "tiny" / "1")
    async with serving(repo) as running:
        for name, (folder, _) in adapters.items():
            (repo / name).mkdir()
            (repo / name / "config.pbtxt").write_text(ADAPTER_CONFIG.format(name=name))
            shutil.copytree(folder, repo / name / "1")
            await running.server.load_model(name)
        yield running


@pytest.fixture
def client(served) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{str(served.client.base_url).rstrip('/')}/v1", api_key="unused", max_retries=0, timeout=120
    )


async def complete(client: openai.AsyncOpenAI, model: str) -> str:
    answer = await client.completions.create(model=model, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0)
    return answer.choices[0].text


async def test_it_answers_each_adapter_as_peft_does(client: openai.AsyncOpenAI, adapters):
    for name, (_, expected) in adapters.items():
        assert await complete(client, name) == expected
    answers = {name: expected for name, (_, expected) in adapters.items()}
    assert answers["tiny-a"] != answers["tiny-b"]
    assert await complete(client, "tiny") not in answers.values()  # the base stays itself


async def test_two_adapters_and_the_base_in_one_batch_each_give_their_own_answer(served, client, adapters):
    alone = {name: await complete(client, name) for name in ("tiny", *adapters)}
    runner = served.server.get_model("tiny").instances[0].backend.runner
    mixed_steps: list[int] = []
    begin_step = runner.lora.begin_step

    def recording(chunks):
        begin_step(chunks)
        mixed_steps.append(len(runner.lora._rows))

    runner.lora.begin_step = recording
    try:
        together = await asyncio.gather(*(complete(client, name) for name in alone))
    finally:
        runner.lora.begin_step = begin_step
    assert dict(zip(alone, together, strict=True)) == alone
    assert max(mixed_steps) == 2  # some step ran both adapters' rows (beside the base's)


async def test_its_models_list_names_the_adapters(client: openai.AsyncOpenAI):
    assert {"tiny", "tiny-a", "tiny-b"} <= {model.id async for model in client.models.list()}


async def test_it_tokenizes_and_holds_to_a_grammar_as_its_base(served, client: openai.AsyncOpenAI):
    asked = {"prompt": PROMPT}
    base = (await served.client.post("/tokenize", json={"model": "tiny"} | asked)).json()
    adapter = (await served.client.post("/tokenize", json={"model": "tiny-a"} | asked)).json()
    assert adapter["tokens"] == base["tokens"] and adapter["max_model_len"] == base["max_model_len"]
    answer = await client.completions.create(
        model="tiny-a", prompt=PROMPT, max_tokens=8, temperature=0, extra_body={"guided_choice": ["yes", "no"]}
    )
    assert answer.choices[0].text in ("yes", "no")


async def test_it_follows_its_base_through_a_reload_and_frees_its_slot_when_unloaded(served, client, adapters):
    await served.server.load_model("tiny")  # a new engine and runner: the adapters are fitted again on first use
    for name, (_, expected) in adapters.items():
        assert await complete(client, name) == expected
    runner = served.server.get_model("tiny").instances[0].backend.runner
    assert len(runner.lora) == 2
    await served.server.unload_model("tiny-b")
    assert len(runner.lora) == 1
    await served.server.load_model("tiny-b")
    assert await complete(client, "tiny-b") == adapters["tiny-b"][1]


async def test_a_base_takes_no_more_adapters_than_its_max_loras(served, adapters, tmp_path: Path):
    shutil.copytree(adapters["tiny-a"][0], tmp_path / "1")
    config = {"name": "tiny-c", "backend": "lora", "parameters": {"base_model": {"string_value": "tiny"}}}
    with pytest.raises(LoadError, match="its base serves at most 2 adapters \\(its parameter 'max_loras'\\)"):
        await served.server.load_model("tiny-c", config=config, versions={1: tmp_path / "1"})


async def test_an_adapter_without_its_base_does_not_load(served, adapters, tmp_path: Path):
    repo_model = tmp_path / "1"
    shutil.copytree(adapters["tiny-a"][0], repo_model)
    with pytest.raises(Exception, match="base model 'absent' is not loaded"):
        config = {"name": "orphan", "backend": "lora", "parameters": {"base_model": {"string_value": "absent"}}}
        await served.server.load_model("orphan", config=config, versions={1: repo_model})


async def test_an_adapter_named_before_its_base_loads_it_first_at_start_up(tiny_llama_folder: Path, adapters, tmp_path):
    from engine.serving.model_status import ModelState
    from engine.serving.server import InferenceServer
    from engine.settings import EngineSettings

    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(tiny_llama_folder, tmp_path / "tiny" / "1")
    (tmp_path / "a-lora").mkdir()  # its name comes first: the repository loads in name order
    (tmp_path / "a-lora" / "config.pbtxt").write_text(ADAPTER_CONFIG.format(name="a-lora"))
    shutil.copytree(adapters["tiny-a"][0], tmp_path / "a-lora" / "1")
    server = InferenceServer(tmp_path, gpu_count=0, settings=EngineSettings())
    await server.start(load_models=True)
    try:
        assert server.status("a-lora").versions[1].state is ModelState.READY
        assert server.status("tiny").versions[1].state is ModelState.READY
    finally:
        await server.stop()


async def test_it_refuses_an_adapter_it_would_not_apply_whole(adapters, tmp_path: Path):
    import json

    folder = tmp_path / "dora"
    shutil.copytree(adapters["tiny-a"][0], folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps(config | {"use_dora": True}))
    with pytest.raises(LoadError, match="DoRA is not supported"):
        LoRAAdapter.read(folder, "dora")
