/* The playground: a streamed completion from /v1/completions, shown token by token, with the time to the first
 * token and the tokens per second; "Stop" aborts the request, which cancels the generation on the server. */
(function () {
  "use strict";

  function init(root) {
    const form = root.querySelector("#playground-form");
    const prompt = root.querySelector("#playground-prompt");
    const maxTokens = root.querySelector("#playground-max-tokens");
    const temperature = root.querySelector("#playground-temperature");
    const token = root.querySelector("#playground-token");
    const generateButton = root.querySelector("#playground-generate");
    const stopButton = root.querySelector("#playground-stop");
    const status = root.querySelector("#playground-status");
    const output = root.querySelector("#playground-output");
    let controller = null;

    function finish(message) {
      status.textContent = message;
      generateButton.disabled = false;
      stopButton.disabled = true;
      controller = null;
    }

    async function generate() {
      controller = new AbortController();
      generateButton.disabled = true;
      stopButton.disabled = false;
      output.textContent = "";
      delete root.dataset.tokens;
      status.textContent = "Waiting for the first token…";
      const headers = { "Content-Type": "application/json", Accept: "text/event-stream" };
      if (token.value) headers.Authorization = `Bearer ${token.value}`;
      const body = {
        model: root.dataset.model,
        prompt: prompt.value,
        max_tokens: Number(maxTokens.value) || 64,
        temperature: Number(temperature.value),
        stream: true,
      };
      const started = performance.now();
      let first = null;
      let tokens = 0;
      let response;
      try {
        response = await fetch("/v1/completions", {
          method: "POST",
          headers,
          body: JSON.stringify(body),
          signal: controller.signal,
          credentials: "same-origin",
        });
      } catch (error) {
        finish(`The request failed: ${error.message}`);
        return;
      }
      if (!response.ok) {
        let message = `HTTP ${response.status}`;
        try {
          message += `: ${(await response.json()).error.message}`;
        } catch (_) {
          /* not JSON: the status says enough */
        }
        finish(message);
        return;
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      const report = (done) => {
        const seconds = (performance.now() - (first ?? started)) / 1000;
        const rate = tokens > 1 && seconds > 0 ? ((tokens - 1) / seconds).toFixed(1) : "–";
        const ttft = first === null ? "–" : `${(first - started).toFixed(0)} ms`;
        root.dataset.tokens = String(tokens);
        return `${done ? "Done" : "Generating"} · time to first token ${ttft} · ${tokens} tokens · ${rate} tokens/s`;
      };
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const event = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            if (!event.startsWith("data: ")) continue;
            const data = event.slice(6);
            if (data === "[DONE]") continue;
            const chunk = JSON.parse(data);
            if (chunk.error) {
              finish(`The model failed: ${chunk.error.message}`);
              return;
            }
            const text = chunk.choices[0].text;
            if (text) {
              if (first === null) first = performance.now();
              tokens += 1;
              output.textContent += text;
              status.textContent = report(false);
            }
          }
        }
        finish(report(true));
      } catch (error) {
        finish(error.name === "AbortError" ? `Stopped · ${report(false)}` : `The stream failed: ${error.message}`);
      }
    }

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (!controller) generate();
    });
    stopButton.addEventListener("click", () => controller && controller.abort());
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("playground");
    if (root) init(root);
  });
})();
