/* Live metrics from /ws/metrics/, for any console page.
 *
 * InferaLive.MetricsSocket: a WebSocket that reconnects by itself with exponential backoff and reports its state.
 * Small live numbers: include this script and mark elements up; they are filled once a second:
 *   <script src="{% static 'monitoring/live.js' %}" defer></script>
 *   <span data-live-model="simple" data-live-field="inferences_per_s"></span>
 * data-live-field: success_per_s (default), failure_per_s, inferences_per_s, executions_per_s, pending,
 *   p50, p95, p99 (request latency, ms), queue_ms, compute_ms; a language model's llm.<key> (llm.running,
 *   llm.waiting, llm.kv_cache_usage, llm.prefix_cache_hit_rate, llm.generation_tokens_per_s, llm.ttft_ms, ...).
 *   data-live-version="2" picks one version; without it the versions of the model are combined (rates and pending
 *   summed, latency the worst; a language model's sequences summed, its KV cache's usage over all its blocks).
 * Each element gets data-live-state="live" | "stale" | "offline" and a formatted text ("12.5/s", "3.1 ms", "4").
 * Page scripts that want the whole snapshot listen for "infera:snapshot" on document (event.detail is it).
 */
(function () {
  "use strict";

  const CLOSE_CODES_REFUSED = new Set([4401, 4403]);
  const RATE_FIELDS = new Set(["success_per_s", "failure_per_s", "inferences_per_s", "executions_per_s"]);
  const LATENCY_FIELDS = new Set(["p50", "p95", "p99"]);
  const STALE_AFTER_MS = 5000;
  const LLM_SUMMED = ["running", "waiting", "kv_cache_blocks", "prefix_cache_queries", "prefix_cache_hits",
    "preemptions", "prompt_tokens_per_s", "generation_tokens_per_s", "finished_per_s"];
  const LLM_TIMES = ["queue_ms", "ttft_ms", "itl_ms", "e2e_ms"];

  /* A WebSocket to the metrics stream that reconnects with exponential backoff (reset once data flows). */
  class MetricsSocket {
    constructor({ path = "/ws/metrics/", params = () => ({}), onMessage = () => {}, onState = () => {},
                  minDelayMs = 500, maxDelayMs = 30000 } = {}) {
      Object.assign(this, { path, params, onMessage, onState, minDelayMs, maxDelayMs });
      this.delayMs = minDelayMs;
      this.socket = null;
      this.timer = null;
      this.stopped = true;
    }

    start() {
      this.stopped = false;
      this.open();
      return this;
    }

    stop() {
      this.stopped = true;
      clearTimeout(this.timer);
      if (this.socket) this.socket.close(1000);
    }

    send(message) {
      if (this.socket && this.socket.readyState === WebSocket.OPEN) {
        this.socket.send(JSON.stringify(message));
        return true;
      }
      return false;
    }

    url() {
      const url = new URL(this.path, window.location.href);
      url.protocol = window.location.protocol === "https:" ? "wss:" : "ws:";
      for (const [key, value] of Object.entries(this.params())) {
        if (value !== null && value !== undefined && value !== "") url.searchParams.set(key, value);
      }
      return url.toString();
    }

    open() {
      clearTimeout(this.timer);
      this.onState("connecting", {});
      const socket = (this.socket = new WebSocket(this.url()));
      let receivedData = false;
      socket.onopen = () => this.onState("live", {});
      socket.onmessage = (event) => {
        if (!receivedData) {
          receivedData = true;
          this.delayMs = this.minDelayMs; // only a socket that delivers resets the backoff
        }
        this.onMessage(JSON.parse(event.data));
      };
      socket.onclose = (event) => {
        if (socket !== this.socket || this.stopped) return;
        if (CLOSE_CODES_REFUSED.has(event.code)) {
          this.onState("refused", { code: event.code });
          return;
        }
        const wait = this.delayMs;
        this.delayMs = Math.min(this.delayMs * 2, this.maxDelayMs);
        this.onState("reconnecting", { inSeconds: Math.round(wait / 100) / 10 });
        this.timer = setTimeout(() => this.open(), wait);
      };
    }
  }

  /* The versions of each model in a snapshot, combined into one entry per model name. */
  function byModel(snapshot) {
    const models = new Map();
    for (const entry of snapshot.models || []) {
      const merged = models.get(entry.name) || {
        name: entry.name, success_per_s: 0, failure_per_s: 0, inferences_per_s: 0, executions_per_s: 0,
        pending: 0, latency_ms: null, queue_ms: null, compute_ms: null, batch_sizes: {}, protocols: {},
        _weight: 0, _queue: 0, _compute: 0,
      };
      for (const field of RATE_FIELDS) merged[field] += entry[field] || 0;
      merged.pending += entry.pending || 0;
      if (entry.latency_ms) {
        merged.latency_ms = merged.latency_ms || { p50: 0, p95: 0, p99: 0 };
        for (const p of LATENCY_FIELDS) merged.latency_ms[p] = Math.max(merged.latency_ms[p], entry.latency_ms[p]);
      }
      if (entry.queue_ms !== null && entry.compute_ms !== null) {
        const weight = entry.success_per_s || 1e-9; // time per request, weighted by each version's requests
        merged._weight += weight;
        merged._queue += entry.queue_ms * weight;
        merged._compute += entry.compute_ms * weight;
        merged.queue_ms = merged._queue / merged._weight;
        merged.compute_ms = merged._compute / merged._weight;
      }
      for (const [size, count] of Object.entries(entry.batch_sizes || {})) {
        merged.batch_sizes[size] = (merged.batch_sizes[size] || 0) + count;
      }
      for (const [protocol, rate] of Object.entries(entry.protocols || {})) {
        merged.protocols[protocol] = (merged.protocols[protocol] || 0) + rate;
      }
      if (entry.sequences) { // a draining old version's sequences count with the new one's
        merged.sequences = merged.sequences || { live: 0, backlog: 0, slots_used: 0, slots: 0 };
        for (const key of Object.keys(merged.sequences)) merged.sequences[key] += entry.sequences[key] || 0;
      }
      if (entry.streams) { // a decoupled model's streams: counts add up, times are the slowest version's
        const streams = (merged.streams = merged.streams || {
          in_flight: 0, responses_per_s: 0, first_response_ms: null, between_responses_ms: null,
        });
        streams.in_flight += entry.streams.in_flight || 0;
        streams.responses_per_s += entry.streams.responses_per_s || 0;
        for (const key of ["first_response_ms", "between_responses_ms"]) {
          const value = entry.streams[key];
          if (value !== null) streams[key] = Math.max(streams[key] ?? 0, value);
        }
      }
      if (entry.llm) merged.llm = addLanguageModel(merged.llm, entry.llm);
      models.set(entry.name, merged);
    }
    return models;
  }

  /* A language model's versions as one: sequences, blocks and counts add up, the KV cache's usage is over all its
   * blocks, the hit rate over all lookups, times are the slowest version's. */
  function addLanguageModel(total, llm) {
    total = total || { _kv_used: 0, ...Object.fromEntries(LLM_SUMMED.map((key) => [key, 0])) };
    for (const key of LLM_SUMMED) total[key] += llm[key] || 0;
    total._kv_used += (llm.kv_cache_usage || 0) * (llm.kv_cache_blocks || 0);
    total.kv_cache_usage = total.kv_cache_blocks ? total._kv_used / total.kv_cache_blocks : 0;
    total.prefix_cache_hit_rate = total.prefix_cache_queries
      ? total.prefix_cache_hits / total.prefix_cache_queries : null;
    for (const key of LLM_TIMES) {
      if (llm[key] !== null && llm[key] !== undefined) total[key] = Math.max(total[key] ?? 0, llm[key]);
    }
    return total;
  }

  function valueOf(snapshot, model, field, version) {
    const entries = version
      ? (snapshot.models || []).filter((m) => m.name === model && String(m.version) === String(version))
      : [];
    const entry = version ? entries[0] : byModel(snapshot).get(model);
    if (!entry) return null;
    if (LATENCY_FIELDS.has(field)) return entry.latency_ms ? entry.latency_ms[field] : null;
    if (field.startsWith("llm.")) return entry.llm ? entry.llm[field.slice(4)] ?? null : null;
    const value = entry[field];
    return value === undefined ? null : value;
  }

  function format(value, field) {
    if (value === null || value === undefined) return "–";
    if (field.endsWith("_usage") || field.endsWith("_rate")) return `${(value * 100).toFixed(1)}%`;
    if (RATE_FIELDS.has(field) || field.endsWith("_per_s")) return `${value < 10 ? value.toFixed(1) : Math.round(value)}/s`;
    if (LATENCY_FIELDS.has(field) || field.endsWith("_ms")) return `${value < 10 ? value.toFixed(2) : value.toFixed(1)} ms`;
    return String(Math.round(value));
  }

  /* Fill every [data-live-model] element from one snapshot. */
  function fill(snapshot, root = document) {
    for (const element of root.querySelectorAll("[data-live-model]")) {
      const field = element.dataset.liveField || "success_per_s";
      const value = valueOf(snapshot, element.dataset.liveModel, field, element.dataset.liveVersion);
      element.textContent = format(value, field);
      element.dataset.liveState = "live";
    }
  }

  function markAll(state, root = document) {
    for (const element of root.querySelectorAll("[data-live-model]")) element.dataset.liveState = state;
  }

  /* Keep the page's [data-live-model] elements live; returns the socket (one per page). */
  function watch(root = document) {
    let staleTimer = null;
    return new MetricsSocket({
      params: () => ({ window: 0 }), // no backlog: small numbers need only the newest snapshot
      onMessage: (message) => {
        if (message.type !== "snapshot") return;
        fill(message.snapshot, root);
        document.dispatchEvent(new CustomEvent("infera:snapshot", { detail: message.snapshot }));
        clearTimeout(staleTimer);
        staleTimer = setTimeout(() => markAll("stale", root), STALE_AFTER_MS);
      },
      onState: (state) => {
        if (state !== "live" && state !== "connecting") markAll("offline", root);
      },
    }).start();
  }

  window.InferaLive = { MetricsSocket, byModel, valueOf, format, fill, watch };

  function autostart() {
    // the monitoring page and the overview run their own socket; other pages watch when they carry live numbers
    const ownSocket = document.getElementById("monitoring") || document.getElementById("overview");
    if (!ownSocket && document.querySelector("[data-live-model]")) watch();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", autostart);
  else autostart();
})();
