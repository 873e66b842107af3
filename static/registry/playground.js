/* The playground: a streamed completion from /v1/completions, shown token by token, with the time to the first
 * token and the tokens per second; "Stop" aborts the request, which cancels the generation on the server. The
 * request and its events: event_stream.js. */
(function () {
  "use strict";

  function init(root) {
    const { post, readChunks, rateReport } = window.InferaEventStream;
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
      const report = (done) => {
        root.dataset.tokens = String(tokens);
        return rateReport(done ? "Done" : "Generating", started, first, tokens);
      };
      try {
        const { response, failure } = await post("/v1/completions", body, token.value, controller.signal);
        if (failure) {
          finish(failure);
          return;
        }
        let failed = null;
        await readChunks(response, (chunk) => {
          if (chunk.error) {
            failed = `The model failed: ${chunk.error.message}`;
            return false;
          }
          const text = chunk.choices[0].text;
          if (text) {
            if (first === null) first = performance.now();
            tokens += 1;
            output.textContent += text;
            status.textContent = report(false);
          }
          return true;
        });
        finish(failed ?? report(true));
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
