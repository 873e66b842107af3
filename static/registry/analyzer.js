/* A model's analyzer panel (templates/registry/_analyzer.html): start an analysis, follow it, chart it, apply it.
 *
 * GET {api} lists the model's analyses; POST {api} starts one; GET {api}{id}/ is polled every second while the
 * analysis shown is queued or running. The chart is throughput against p99 latency, one line per config over its
 * concurrency levels, the Pareto front dotted, the budget a vertical line and the recommended point a star (Plotly,
 * served locally, colored for the page's scheme by static/monitoring/charts.js). POST {api}{id}/cancel and
 * {api}{id}/apply are the buttons.
 */
(function () {
  "use strict";

  const POLL_MS = 1000;
  const LIST_MS = 5000;
  const OPEN = ["QUEUED", "RUNNING"];
  const PALETTE = ["#2f6fdb", "#e07b24", "#1b9e5a", "#c0392b", "#8e44ad", "#16a2b8", "#b8860b", "#5d6d7e"];

  function numbers(text) {
    return text.split(/[\s,]+/).filter(Boolean).map(Number);
  }

  function fixed(value, digits) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
  }

  function initAnalyzer(root) {
    const { api, problem, el, notice, every } = window.InferaRegistry;
    const base = root.dataset.api;
    const canManage = root.dataset.canManage === "true";
    const form = root.querySelector("#analysis-form");
    const result = root.querySelector("#analysis-result");
    const view = root.querySelector("#analysis-view");
    const cancel = root.querySelector("#analysis-cancel");
    const apply = root.querySelector("#analysis-apply");
    let shown = null; // the analysis on screen (GET {api}{id}/)
    let polling = null;
    const axes = {
      margin: { l: 60, r: 20, t: 10, b: 50 },
      xaxis: { title: { text: "p99 latency (ms, in process)" }, rangemode: "tozero" },
      yaxis: { title: { text: "throughput (infer/s, in process)" }, rangemode: "tozero" },
      legend: { orientation: "h", y: -0.25 },
    };
    // the console's chart colors for the light or dark scheme, kept up to date by charts.js
    const chartBase = window.InferaCharts ? window.InferaCharts.themed(axes) : axes;

    // ---- the form

    function field(id) {
      return root.querySelector(`#${id}`);
    }

    async function fillDefaults() {
      const answer = await api("GET", root.dataset.config);
      if (!answer.ok || !form) return;
      const size = answer.data.config.max_batch_size || 0;
      if (!field("analysis-batch-sizes").value) {
        field("analysis-batch-sizes").value = size >= 2 ? `${Math.floor(size / 2)}, ${size}` : String(size);
      }
      if (size === 0) field("analysis-delays").value = "0";
      describePlan();
    }

    function levels(maximum) {
      const found = [1];
      while (found[found.length - 1] * 2 < maximum) found.push(found[found.length - 1] * 2);
      if (maximum > 1) found.push(maximum);
      return found;
    }

    function describePlan() {
      const configs = [numbers(field("analysis-batch-sizes").value), numbers(field("analysis-delays").value),
        numbers(field("analysis-instances").value)].reduce((count, values) => count * Math.max(values.length, 1), 1);
      const points = levels(Math.max(1, Number(field("analysis-concurrency").value) || 1));
      const seconds = configs * points.length * (Number(field("analysis-seconds").value) || 0);
      field("analysis-plan").textContent =
        `${configs} config${configs === 1 ? "" : "s"} × concurrency ${points.join(", ")}: about ` +
        `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)} s of measurement, plus loading each config.`;
    }

    async function samples() {
      const file = field("analysis-samples").files[0];
      if (!file) return null;
      return JSON.parse(await file.text());
    }

    async function startAnalysis(event) {
      event.preventDefault();
      let sample;
      try {
        sample = await samples();
      } catch (error) {
        notice(result, false, `The sample inputs are not JSON: ${error.message}`);
        return;
      }
      const body = {
        budget_ms: Number(field("analysis-budget").value),
        max_concurrency: Number(field("analysis-concurrency").value),
        max_batch_sizes: numbers(field("analysis-batch-sizes").value),
        queue_delays_us: numbers(field("analysis-delays").value),
        instance_counts: numbers(field("analysis-instances").value),
        seconds_per_point: Number(field("analysis-seconds").value),
      };
      if (sample) body.sample_inputs = sample;
      field("analysis-start").disabled = true;
      const answer = await api("POST", base, body);
      field("analysis-start").disabled = false;
      if (!answer.ok) {
        notice(result, false, problem(answer));
        return;
      }
      notice(result, true, `Analysis ${answer.data.id} queued: ${answer.data.plan.candidates.length} configs.`);
      show(answer.data);
      await refreshList();
    }

    // ---- one analysis

    async function load(id) {
      const answer = await api("GET", `${base}${id}/`);
      if (answer.ok) show(answer.data);
      return answer.ok ? answer.data : null;
    }

    function show(analysis) {
      shown = analysis;
      const open = OPEN.includes(analysis.state);
      view.hidden = false;
      view.dataset.analysis = String(analysis.id);
      root.dataset.state = analysis.state;
      // "queued" and "cancelling" notices are stale once the analysis has ended: its state says it now
      if (!open && /^Analysis \d+( queued|: cancelling)/.test(result.textContent)) result.hidden = true;
      field("analysis-title").textContent = `${analysis.id} (version ${analysis.version}, p99 budget ${analysis.budget_ms} ms)`;
      const state = field("analysis-state");
      state.textContent = analysis.cancel_requested && open ? "CANCELLING" : analysis.state;
      state.className = `state state-${analysis.state.toLowerCase()}`;
      const progress = field("analysis-progress");
      progress.max = Math.max(analysis.progress.total, 1);
      progress.value = analysis.progress.done;
      if (cancel) cancel.hidden = !open;
      draw(analysis);
      showPoints(analysis);
      showRecommendation(analysis);
      if (open && !polling) polling = every(POLL_MS, follow);
    }

    async function follow() {
      if (!shown) return;
      const fresh = await load(shown.id);
      if (fresh && !OPEN.includes(fresh.state)) {
        if (polling) polling();
        polling = null;
        await refreshList();
      }
    }

    function label(analysis, index) {
      return analysis.plan.candidates[index].label;
    }

    function draw(analysis) {
      const chart = field("analysis-chart");
      if (!window.Plotly) return;
      const traces = analysis.plan.candidates.map((candidate, index) => {
        const points = analysis.points.filter((p) => p.candidate === index && p.p99_ms !== null);
        return {
          type: "scatter",
          mode: "lines+markers",
          name: candidate.label,
          x: points.map((p) => p.p99_ms),
          y: points.map((p) => p.throughput),
          text: points.map((p) => `concurrency ${p.concurrency}, mean batch ${fixed(p.mean_batch, 1)}, ${p.client_requests} client requests meanwhile`),
          hovertemplate: "%{text}<br>p99 %{x:.2f} ms<br>%{y:.1f} infer/s<extra>%{fullData.name}</extra>",
          line: { color: PALETTE[index % PALETTE.length], width: 2 },
          marker: { size: 8 },
        };
      });
      const front = analysis.points.filter((p) => p.pareto).sort((a, b) => a.p99_ms - b.p99_ms);
      traces.push({
        type: "scatter",
        mode: "lines+markers",
        name: "Pareto front",
        x: front.map((p) => p.p99_ms),
        y: front.map((p) => p.throughput),
        line: { color: "#5b6b7c", dash: "dot", width: 1.5 },
        marker: { size: 14, symbol: "circle-open", color: "#5b6b7c" },
        hoverinfo: "skip",
      });
      const best = analysis.recommendation;
      if (best) {
        traces.push({
          type: "scatter",
          mode: "markers",
          name: "recommended",
          x: [best.p99_ms],
          y: [best.throughput],
          marker: { size: 18, symbol: "star", color: "#b8860b", line: { color: "#1d2733", width: 1 } },
          hovertemplate: `${best.label} at concurrency ${best.concurrency}<extra>recommended</extra>`,
        });
      }
      // a budget far beyond every point would squash them against the axis: it is then named at the edge instead
      const slowest = Math.max(0, ...analysis.points.filter((p) => p.p99_ms !== null).map((p) => p.p99_ms));
      const budgetShown = !slowest || analysis.budget_ms <= slowest * 2;
      const budgetColor = "#b3261e";
      const layout = {
        ...chartBase,
        xaxis: budgetShown ? { ...chartBase.xaxis, autorange: true } : { ...chartBase.xaxis, range: [0, slowest * 1.1] },
        shapes: budgetShown
          ? [{ type: "line", xref: "x", yref: "paper", x0: analysis.budget_ms, x1: analysis.budget_ms, y0: 0, y1: 1,
            line: { color: budgetColor, dash: "dash", width: 1 } }]
          : [],
        annotations: [
          budgetShown
            ? { xref: "x", yref: "paper", x: analysis.budget_ms, y: 1, text: "p99 budget", showarrow: false,
              xanchor: "left", font: { color: budgetColor } }
            : { xref: "paper", yref: "paper", x: 1, y: 1, text: `p99 budget ${analysis.budget_ms} ms →`,
              showarrow: false, xanchor: "right", font: { color: budgetColor } },
        ],
        uirevision: String(analysis.id),
      };
      window.Plotly.react(chart, traces, layout, window.InferaCharts ? window.InferaCharts.PLOT_CONFIG : {});
      chart.dataset.points = String(analysis.points.length);
      const sent = analysis.points.reduce((sum, p) => sum + p.requests, 0);
      const clients = analysis.points.reduce((sum, p) => sum + p.client_requests, 0);
      field("analysis-load-note").textContent =
        `Analysis load: ${sent} in-process requests on temporary versions (not client traffic, and not in the model's ` +
        `live charts); client requests the served version answered meanwhile: ${clients}.` +
        (analysis.sample_inputs ? " Inputs: the uploaded samples." : " Inputs: random data of each input's type and shape.");
    }

    function showPoints(analysis) {
      field("analysis-points").replaceChildren(
        ...analysis.points.map((p) =>
          el(
            "tr",
            { dataset: { candidate: p.candidate, concurrency: p.concurrency } },
            el("td", {}, label(analysis, p.candidate)),
            el("td", {}, p.concurrency),
            el("td", {}, fixed(p.throughput, 1)),
            el("td", {}, fixed(p.p50_ms, 2)),
            el("td", {}, fixed(p.p99_ms, 2)),
            el("td", {}, fixed(p.mean_batch, 2)),
            el("td", { title: p.error }, p.failures),
            el("td", {}, p.client_requests),
            el("td", {}, p.pareto ? "yes" : ""),
          ),
        ),
      );
    }

    function showRecommendation(analysis) {
      const box = field("analysis-recommendation");
      const best = analysis.recommendation;
      box.dataset.candidate = best ? String(best.candidate) : "";
      if (OPEN.includes(analysis.state)) {
        box.textContent = analysis.state === "QUEUED" ? "Waiting for a serving process to take it…" : `Measuring… ${analysis.progress.done} of ${analysis.progress.total} points.`;
      } else if (analysis.state !== "DONE") {
        box.textContent = `${analysis.state}${analysis.error ? ": " + analysis.error : ""}`;
      } else if (best) {
        box.textContent = `Recommended: ${best.label}: ${fixed(best.throughput, 1)} infer/s at concurrency ${best.concurrency}, p99 ${fixed(best.p99_ms, 2)} ms (budget ${best.budget_ms} ms).`;
      } else {
        box.textContent = `No recommendation: ${analysis.note}`;
      }
      if (apply) {
        apply.hidden = !(analysis.state === "DONE" && best);
        apply.disabled = analysis.applied_version !== null;
        apply.textContent = analysis.applied_version !== null ? `Applied as version ${analysis.applied_version}` : "Apply as a new version";
      }
    }

    async function cancelAnalysis() {
      if (!shown) return;
      const answer = await api("POST", `${base}${shown.id}/cancel`);
      notice(result, answer.ok, answer.ok ? `Analysis ${shown.id}: cancelling.` : problem(answer));
      if (answer.ok) show(answer.data);
    }

    async function applyRecommendation() {
      if (!shown || !shown.recommendation) return;
      const question = `Create a new version of this model with ${shown.recommendation.label}? It becomes active once it is READY.`;
      if (!window.confirm(question)) return;
      apply.disabled = true;
      const answer = await api("POST", `${base}${shown.id}/apply`, {});
      if (!answer.ok) {
        apply.disabled = false;
        notice(result, false, problem(answer));
        return;
      }
      result.dataset.version = String(answer.data.number);
      notice(result, true, `Version ${answer.data.number} created with ${shown.recommendation.label}; it takes traffic once it is READY.`);
      await load(shown.id);
      await refreshList();
    }

    // ---- the list

    async function refreshList() {
      const answer = await api("GET", base);
      const rows = field("analysis-rows");
      if (!answer.ok) {
        rows.replaceChildren(el("tr", {}, el("td", { colspan: 8, className: "muted" }, problem(answer))));
        return;
      }
      const analyses = answer.data;
      const running = analyses.find((a) => OPEN.includes(a.state));
      field("analysis-summary").textContent = running ? `(analysis ${running.id} ${running.state.toLowerCase()})` : "";
      if (!analyses.length) {
        rows.replaceChildren(el("tr", {}, el("td", { colspan: 8, className: "muted" }, "No analysis yet.")));
      } else {
        rows.replaceChildren(...analyses.map(row));
      }
      if (!shown && analyses.length) await load((running || analyses[0]).id);
      else if (running && shown && shown.id !== running.id) await load(running.id);
    }

    function row(analysis) {
      const best = analysis.recommendation;
      return el(
        "tr",
        { dataset: { analysis: analysis.id, state: analysis.state } },
        el("td", {}, analysis.id),
        el("td", {}, new Date(analysis.created_at).toLocaleString()),
        el("td", {}, analysis.requested_by || "system"),
        el("td", {}, el("span", { className: `state state-${analysis.state.toLowerCase()}` }, analysis.state)),
        el("td", {}, `${analysis.budget_ms} ms`),
        el("td", {}, best ? `${best.label} (${fixed(best.throughput, 1)} infer/s, p99 ${fixed(best.p99_ms, 2)} ms)` : analysis.note || analysis.error || ""),
        el("td", {}, analysis.applied_version !== null ? `version ${analysis.applied_version}` : ""),
        el("td", {}, el("button", { type: "button", className: "secondary", onclick: () => load(analysis.id) }, "Show")),
      );
    }

    if (form) {
      form.addEventListener("submit", startAnalysis);
      form.addEventListener("input", describePlan);
      fillDefaults();
    }
    if (cancel) cancel.addEventListener("click", cancelAnalysis);
    if (apply) apply.addEventListener("click", applyRecommendation);
    every(LIST_MS, refreshList);
    if (!canManage && form) form.hidden = true;
  }

  function start() {
    const root = document.getElementById("analyzer");
    if (root && window.InferaRegistry) initAnalyzer(root);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
