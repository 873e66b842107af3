"""The chat in headless Chromium, on a console serving a tiny random Llama: a system prompt and a message stream an
answer into the conversation with the time to first token, the rate and the usage; the next turn sends the history
(the request bodies as the browser sent them); Stop aborts the stream and the server frees the sequence; an error is
a message in the chat, which goes on working; Clear starts over; the page runs under the console's
Content-Security-Policy and has no serious accessibility violation, in either scheme."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.conftest import ServerProcess, sign_in
from tests.console.test_browser_accessibility import violations

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 60_000
SYSTEM = "you answer in a few words"
QUESTION = "what is the capital of france?"
FOLLOW_UP = "and the lazy dog?"
# clicks Stop from inside the page as the answer's first text arrives (a click from the test could come too late)
STOP_AT_FIRST_TOKEN = """() => {
  const log = document.querySelector('#chat-log');
  new MutationObserver((_, observer) => {
    const answer = log.querySelector('.chat-assistant .chat-content');
    if (answer && answer.textContent) { observer.disconnect(); document.querySelector('#chat-stop').click(); }
  }).observe(log, { childList: true, characterData: true, subtree: true });
}"""


def chat_bodies(page) -> list[dict]:
    """The body of every /v1/chat/completions request the page sends, as it sends them."""
    bodies: list[dict] = []
    page.on("request", lambda r: bodies.append(r.post_data_json) if r.url.endswith("/v1/chat/completions") else None)
    return bodies


def open_chat(page, server: ServerProcess) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, server)
    page.goto(server.base_url + "/models/tiny/#playground")
    page.wait_for_selector("#chat-form")
    return errors


def wait_for_status(page, start: str) -> str:
    """The chat's status once it starts with `start` (a selector, not a script: the page may enforce its CSP)."""
    status = page.locator("#chat-status", has_text=re.compile("^" + re.escape(start)))
    status.wait_for(timeout=WAIT_MS)
    return status.inner_text()


def turns(page) -> list[tuple[str, str]]:
    return page.eval_on_selector_all(
        "#chat-log .chat-turn",
        "items => items.map(i => [i.className.split(' ')[1], i.querySelector('.chat-content').textContent])",
    )


def chat_answer(server: ServerProcess, messages: list[dict], max_tokens: int) -> dict:
    """The same chat through /v1/chat/completions, not streamed (temperature 0: the same text)."""
    body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    request = urllib.request.Request(
        server.base_url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def metric(server: ServerProcess, name: str) -> float:
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_it_streams_an_answer_and_sends_the_history_each_turn(llm_server: ServerProcess, page):
    bodies = chat_bodies(page)
    errors = open_chat(page, llm_server)
    page.fill("#chat-system", SYSTEM)
    page.fill("#chat-temperature", "0")
    page.fill("#chat-max-tokens", "8")
    page.fill("#chat-seed", "7")
    page.fill("#chat-message", QUESTION)
    page.press("#chat-message", "Enter")
    status = wait_for_status(page, "Done")
    assert "time to first token" in status and "tokens/s" in status and "8 tokens" in status
    assert " ms" in status.split("time to first token")[1].split("·")[0]  # a measured time, not a dash
    usage = page.inner_text("#chat-usage")
    assert "8 completion tokens" in usage and "prompt tokens" in usage and "cached prompt tokens" in usage
    (_, asked), (_, answered) = turns(page)
    expected = chat_answer(llm_server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": asked}], 8)
    assert asked == QUESTION and answered == expected["choices"][0]["message"]["content"] != ""
    assert page.input_value("#chat-message") == "" and page.evaluate("document.activeElement.id") == "chat-message"

    page.fill("#chat-message", FOLLOW_UP)
    page.press("#chat-message", "Shift+Enter")  # a new line, not a send
    assert page.input_value("#chat-message") == FOLLOW_UP + "\n" and len(bodies) == 1
    page.click("#chat-send")
    wait_for_status(page, "Done")
    first, second = bodies
    assert first["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    assert second["messages"] == [
        *first["messages"],
        {"role": "assistant", "content": answered},
        {"role": "user", "content": FOLLOW_UP + "\n"},
    ]
    for body in bodies:
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0, 1, 8, 7)
    assert [role for role, _ in turns(page)] == ["chat-user", "chat-assistant"] * 2

    page.click("#chat-clear")
    assert turns(page) == []
    page.fill("#chat-message", QUESTION)
    page.press("#chat-message", "Enter")
    wait_for_status(page, "Done")
    assert bodies[-1]["messages"] == first["messages"]  # a new conversation
    assert errors == []


def test_it_stops_the_stream_and_the_server_frees_the_sequence(llm_server: ServerProcess, page):
    errors = open_chat(page, llm_server)
    aborted = 'infera_llm_requests_finished_total{finish_reason="abort",model="tiny",version="1"}'
    before = metric(llm_server, aborted)
    page.fill("#chat-temperature", "0")
    page.fill("#chat-max-tokens", "100")  # the model's max_model_len (128) less the prompt
    page.evaluate(STOP_AT_FIRST_TOKEN)
    page.fill("#chat-message", "tokens")
    page.press("#chat-message", "Enter")
    status = wait_for_status(page, "Stopped")
    assert int(page.get_attribute("#chat", "data-tokens")) < 100
    assert page.is_disabled("#chat-stop") and not page.is_disabled("#chat-send")
    assert page.inner_text("#chat-log .chat-assistant .chat-role") == "Assistant · stopped"
    assert "time to first token" in status
    deadline = time.monotonic() + 30
    while metric(llm_server, aborted) <= before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert metric(llm_server, aborted) == before + 1  # the engine saw the client leave and ended the sequence
    assert metric(llm_server, 'infera_llm_requests_running{model="tiny",version="1"}') == 0
    assert errors == []


def test_it_shows_an_error_in_the_chat_and_goes_on(llm_server: ServerProcess, page):
    bodies = chat_bodies(page)
    errors = open_chat(page, llm_server)
    page.fill("#chat-temperature", "0")
    page.fill("#chat-max-tokens", "4")
    page.fill("#chat-token", "not-a-key")  # a presented key must be valid, whatever the server's mode
    page.fill("#chat-message", QUESTION)
    page.press("#chat-message", "Enter")
    wait_for_status(page, "HTTP 401")
    (user_role, _), (error_role, error_text) = turns(page)
    assert (user_role, error_role) == ("chat-user", "chat-error") and error_text.startswith("HTTP 401: ")
    assert page.input_value("#chat-message") == QUESTION  # back in the box, to send again
    page.fill("#chat-token", "")
    page.press("#chat-message", "Enter")
    wait_for_status(page, "Done")
    assert bodies[-1]["messages"] == [{"role": "user", "content": QUESTION}]  # the failed turn is not history
    assert errors == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_it_runs_under_the_policy_and_is_accessible(chromium_browser, llm_server: ServerProcess, scheme: str):
    context = chromium_browser.new_context(viewport={"width": 1200, "height": 800}, color_scheme=scheme)  # CSP on
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    try:
        sign_in(page, llm_server)
        page.goto(llm_server.base_url + "/models/tiny/#playground", wait_until="networkidle")
        page.fill("#chat-max-tokens", "4")
        page.fill("#chat-message", QUESTION)
        page.press("#chat-message", "Enter")
        wait_for_status(page, "Done")
        problems += violations(page, Axe(), f"/models/tiny/ with a conversation ({scheme})")
    finally:
        context.close()
    assert problems == [], "\n".join(problems)
