/* A streamed answer of the OpenAI-compatible endpoints (/v1/completions, /v1/chat/completions): the POST, and its
 * server-sent events (`data: {...}` chunks, then `data: [DONE]`) read as they arrive. Shared by the completion
 * playground (playground.js) and the chat (chat.js). */
(function () {
  "use strict";

  /* POST `body` as JSON to `url` (the inference token, when given, as a Bearer key). Resolves to
   * { response } once the head of a 2xx answer arrives, or { failure } saying what went wrong (the network, or a
   * 4xx/5xx answer with OpenAI's error message); an abort before the head rejects with the AbortError. */
  async function post(url, body, token, signal) {
    const headers = { "Content-Type": "application/json", Accept: "text/event-stream" };
    if (token) headers.Authorization = `Bearer ${token}`;
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal,
        credentials: "same-origin",
      });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      return { failure: `The request failed: ${error.message}` };
    }
    if (response.ok) return { response };
    let message = `HTTP ${response.status}`;
    try {
      message += `: ${(await response.json()).error.message}`;
    } catch (_) {
      /* not JSON: the status says enough */
    }
    return { failure: message };
  }

  /* Call `onChunk` with each chunk of a streamed response as it arrives, until [DONE] or the end of the body;
   * `onChunk` returning false stops the reading. Network failures and aborts reject. */
  async function readChunks(response, onChunk) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        if (onChunk(JSON.parse(data)) === false) {
          reader.cancel().catch(() => {});
          return;
        }
      }
    }
  }

  /* "Generating · time to first token 12 ms · 17 tokens · 250.0 tokens/s": the rate over the tokens after the
   * first (the first one's wait is the time to first token). */
  function rateReport(state, started, first, tokens) {
    const seconds = (performance.now() - (first ?? started)) / 1000;
    const rate = tokens > 1 && seconds > 0 ? ((tokens - 1) / seconds).toFixed(1) : "–";
    const ttft = first === null ? "–" : `${(first - started).toFixed(0)} ms`;
    return `${state} · time to first token ${ttft} · ${tokens} tokens · ${rate} tokens/s`;
  }

  window.InferaEventStream = { post, readChunks, rateReport };
})();
