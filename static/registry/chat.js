/* The chat (a language model's playground): a system prompt, sampling settings and a conversation sent whole to
 * /v1/chat/completions each turn; the answer streamed token by token into its turn (as text, never as markup), then
 * the time to first token, the tokens per second and the usage. "Stop" aborts the request, which frees the
 * sequence on the server; an error is a message in the conversation and the chat goes on. The request and its
 * events: event_stream.js. */
(function () {
  "use strict";

  const ROLE_NAMES = { user: "You", assistant: "Assistant", error: "Error" };

  function init(root) {
    const { post, readChunks, rateReport } = window.InferaEventStream;
    const form = root.querySelector("#chat-form");
    const system = root.querySelector("#chat-system");
    const message = root.querySelector("#chat-message");
    const temperature = root.querySelector("#chat-temperature");
    const topP = root.querySelector("#chat-top-p");
    const maxTokens = root.querySelector("#chat-max-tokens");
    const seed = root.querySelector("#chat-seed");
    const token = root.querySelector("#chat-token");
    const sendButton = root.querySelector("#chat-send");
    const stopButton = root.querySelector("#chat-stop");
    const clearButton = root.querySelector("#chat-clear");
    const log = root.querySelector("#chat-log");
    const status = root.querySelector("#chat-status");
    const usageLine = root.querySelector("#chat-usage");
    let history = []; // the turns the model has answered: {role, content}, without the system prompt
    let controller = null;
    let epoch = 0; // a Clear starts a new conversation: an answer of the old one still ending is dropped

    function addTurn(role, text) {
      const item = document.createElement("li");
      item.className = `chat-turn chat-${role}`;
      const who = document.createElement("span");
      who.className = "chat-role";
      who.textContent = ROLE_NAMES[role];
      const content = document.createElement("div");
      content.className = "chat-content";
      content.textContent = text;
      item.append(who, content);
      log.append(item);
      log.scrollTop = log.scrollHeight;
      return content;
    }

    function marked(content, className, note) {
      const turn = content.parentElement;
      turn.classList.add(className);
      turn.querySelector(".chat-role").textContent += ` · ${note}`;
    }

    function settings() {
      const body = {
        temperature: Number(temperature.value),
        top_p: Number(topP.value),
        max_tokens: Number(maxTokens.value),
      };
      if (seed.value.trim() !== "") body.seed = Number(seed.value);
      return body;
    }

    function finish(text) {
      status.textContent = text;
      sendButton.disabled = false;
      stopButton.disabled = true;
      controller = null;
      if (document.activeElement === stopButton || document.activeElement === document.body) message.focus();
    }

    function shownUsage(usage) {
      if (!usage) return "";
      const cached = usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : undefined;
      const parts = [`${usage.prompt_tokens} prompt tokens`, `${usage.completion_tokens} completion tokens`];
      if (cached !== undefined) parts.push(`${cached} cached prompt tokens`);
      return `Usage: ${parts.join(" · ")}`;
    }

    async function send(text) {
      controller = new AbortController();
      const conversation = epoch;
      sendButton.disabled = true;
      stopButton.disabled = false;
      usageLine.textContent = "";
      delete root.dataset.tokens;
      const asked = { role: "user", content: text };
      const messages = [...history, asked];
      if (system.value.trim() !== "") messages.unshift({ role: "system", content: system.value });
      const userTurn = addTurn("user", text);
      const answer = addTurn("assistant", "");
      answer.parentElement.setAttribute("aria-busy", "true");
      status.textContent = "Waiting for the first token…";
      const body = {
        model: root.dataset.model,
        messages,
        ...settings(),
        stream: true,
        stream_options: { include_usage: true },
      };
      const started = performance.now();
      let first = null;
      let pieces = 0;
      let usage = null;
      let finishReason = null;
      const report = (state) => {
        // the model's own count once it is known (a piece of text may carry more than one token)
        const tokens = usage ? usage.completion_tokens : pieces;
        root.dataset.tokens = String(tokens);
        const reason = finishReason ? ` · finish reason ${finishReason}` : "";
        return rateReport(state, started, first, tokens) + reason;
      };
      const failed = (reason) => {
        // the exchange is not part of the conversation: its message goes back to the box to send again
        answer.parentElement.remove();
        marked(userTurn, "chat-failed", "not sent");
        addTurn("error", reason);
        if (message.value === "") message.value = text;
        finish(reason);
      };
      const keep = () => {
        history = [...history, asked, { role: "assistant", content: answer.textContent }];
        answer.parentElement.removeAttribute("aria-busy");
      };
      try {
        const { response, failure } = await post("/v1/chat/completions", body, token.value, controller.signal);
        if (failure) {
          failed(failure);
          return;
        }
        let modelError = null;
        await readChunks(response, (chunk) => {
          if (chunk.error) {
            modelError = `The model failed: ${chunk.error.message}`;
            return false;
          }
          if (chunk.usage) usage = chunk.usage;
          const choice = chunk.choices && chunk.choices[0];
          if (!choice) return true;
          if (choice.finish_reason) finishReason = choice.finish_reason;
          const piece = choice.delta && choice.delta.content;
          if (piece) {
            if (first === null) first = performance.now();
            pieces += 1;
            answer.textContent += piece;
            log.scrollTop = log.scrollHeight;
            status.textContent = report("Generating");
          }
          return true;
        });
        if (modelError) {
          failed(modelError);
          return;
        }
        keep();
        usageLine.textContent = shownUsage(usage);
        finish(report("Done"));
      } catch (error) {
        if (conversation !== epoch) {
          finish("Conversation cleared");
          return;
        }
        if (error.name !== "AbortError") {
          failed(`The stream failed: ${error.message}`);
          return;
        }
        if (answer.textContent === "") {
          failed("Stopped before the first token");
          return;
        }
        keep(); // what was shown of the answer stays in the conversation
        marked(answer, "chat-stopped", "stopped");
        finish(`Stopped · ${report("Generating")}`);
      }
    }

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const text = message.value;
      if (controller || text.trim() === "") return;
      message.value = "";
      message.focus();
      send(text);
    });
    message.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        form.requestSubmit(sendButton);
      }
    });
    stopButton.addEventListener("click", () => controller && controller.abort());
    clearButton.addEventListener("click", () => {
      epoch += 1;
      if (controller) controller.abort();
      history = [];
      log.replaceChildren();
      status.textContent = "Conversation cleared";
      usageLine.textContent = "";
      delete root.dataset.tokens;
      message.focus();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("chat");
    if (root) init(root);
  });
})();
