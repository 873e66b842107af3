/* A model's traffic panel: its policy (mode, weights on a slider, shadow candidate and share, automatic rollback),
 * promote and roll back, the loaded versions side by side live, and what a shadow saw.
 *
 * The policy, the READY versions and the shadow figures come from GET /api/models/{name}/traffic every three
 * seconds; changes go to the same API (PUT, POST .../promote, POST .../rollback). The live numbers and charts follow
 * the metrics stream live.js opens for the page ("infera:snapshot" events: one entry per loaded version).
 */
(function () {
  "use strict";

  const POLL_MS = 3000;
  const CHART_POINTS = 120; // two minutes of snapshots, one a second
  const SHOWN_VALUES = 8; // of each tensor of a sampled disagreement
  const FAILURES_AXIS = { title: { text: "failures/s" }, overlaying: "y", side: "right", rangemode: "tozero" };

  function percent(fraction) {
    return `${Math.round(fraction * 1000) / 10}%`;
  }

  /* A policy (the engine's JSON form) in a few words. */
  function describe(policy) {
    if (!policy || policy.mode === "active") return "active: every request to the active version";
    if (policy.mode === "canary") {
      const entries = Object.entries(policy.weights).sort(([a], [b]) => Number(a) - Number(b));
      const total = entries.reduce((sum, [, weight]) => sum + weight, 0) || 1;
      return `canary: ${entries.map(([version, weight]) => `v${version} ${percent(weight / total)}`).join(" · ")}`;
    }
    const share = policy.shadow_share < 1 ? ` (${percent(policy.shadow_share)} of requests)` : "";
    return `shadow: copies to v${policy.candidate}${share}`;
  }

  function samePolicy(a, b) {
    return JSON.stringify(a) === JSON.stringify(b); // both in the engine's form, keys in one order
  }

  function initTraffic(root, name) {
    const { api, problem, el, notice, every } = window.InferaRegistry;
    const url = root.dataset.api;
    const result = root.querySelector("#traffic-result");
    let latest = null; // the last answer of GET .../traffic
    const editor = initEditor(root, () => latest, el);
    const live = initLive(root, name, el);

    function show(data) {
      latest = data;
      const policy = data.policy;
      root.dataset.mode = policy.mode;
      root.dataset.inForce = data.in_force ? data.in_force.mode : "";
      root.querySelector("#traffic-summary").textContent = describe(policy);
      const inForce = root.querySelector("#traffic-in-force");
      if (data.in_force === null) inForce.textContent = "No engine runs in this process: this is the desired policy.";
      else if (samePolicy(data.in_force, policy)) inForce.textContent = "In force in this process's engine.";
      else inForce.textContent = `Saved; the reconciler puts it in force (now: ${describe(data.in_force)}).`;
      const rolledBack = root.querySelector("#traffic-rolled-back");
      rolledBack.hidden = !data.rolled_back;
      rolledBack.textContent = data.rolled_back ? `The engine rolled the last policy back: ${data.rolled_back}` : "";
      if (editor) editor.show(data);
      showShadow(data.shadow);
      live.roles(data);
    }

    async function refresh() {
      const answer = await api("GET", url);
      if (answer.ok) show(answer.data);
      else root.querySelector("#traffic-in-force").textContent = `Cannot refresh: ${problem(answer)}`;
    }

    // ---- changes: save, promote, roll back

    const form = root.querySelector("#traffic-form");
    if (form) {
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const save = form.querySelector("#traffic-save");
        save.disabled = true;
        const answer = await api("PUT", url, editor.policy());
        save.disabled = false;
        if (!answer.ok) {
          notice(result, false, problem(answer));
          return;
        }
        editor.saved();
        notice(result, true, `Saved: ${describe(answer.data.policy)}. The reconciler puts it in force.`);
        show(answer.data);
      });
      action(
        "#traffic-promote",
        "promote",
        () =>
          `Promote version ${latest.promotion_candidate} of '${name}'? It becomes the active version and takes every ` +
          "request that names no version.",
        (data) => `Version ${data.active_version} promoted: it is the active version and takes every request.`,
      );
      action(
        "#traffic-rollback",
        "rollback",
        () =>
          `Roll back the ${latest.policy.mode} of '${name}'? Every request that names no version goes to the active ` +
          `version ${latest.active_version} again.`,
        () => "Rolled back: every request goes to the active version.",
      );
    }

    function action(selector, path, question, done) {
      const button = form.querySelector(selector);
      button.addEventListener("click", async () => {
        if (!latest || !window.confirm(question())) return;
        button.disabled = true;
        const answer = await api("POST", `${url}/${path}`);
        if (!answer.ok) {
          button.disabled = false;
          notice(result, false, problem(answer));
          return;
        }
        editor.saved();
        notice(result, true, done(answer.data));
        show(answer.data);
      });
    }

    // ---- what a shadow saw: agreement per output, the candidate's failures, sampled disagreements

    function showShadow(shadow) {
      const box = root.querySelector("#traffic-shadow-figures");
      box.hidden = !shadow;
      if (!shadow) return;
      const rows = Object.entries(shadow.outputs).map(([output, counts]) => {
        const compared = counts.agree + counts.disagree;
        const rowsCompared = (counts.argmax_agree || 0) + (counts.argmax_disagree || 0);
        const argmax = counts.argmax_agree === null || !rowsCompared ? "–" : percent(counts.argmax_agree / rowsCompared);
        return el(
          "tr",
          { dataset: { output } },
          el("td", {}, output),
          el("td", { className: "agreement" }, compared ? percent(counts.agree / compared) : "–"),
          el("td", {}, compared),
          el("td", {}, argmax),
          el("td", {}, counts.max_abs_diff === null ? "–" : counts.max_abs_diff.toPrecision(3)),
        );
      });
      const agreement = root.querySelector("#traffic-agreement-rows");
      if (rows.length) agreement.replaceChildren(...rows);
      else agreement.replaceChildren(el("tr", {}, el("td", { colspan: 5, className: "muted" }, "No copy compared yet.")));
      root.querySelector("#traffic-candidate-failures").textContent =
        `Copies that failed on the candidate: ${shadow.candidate_failures}.`;
      const samples = shadow.disagreements.slice().reverse().map(disagreement);
      const list = root.querySelector("#traffic-disagreements");
      if (samples.length) list.replaceChildren(...samples);
      else list.replaceChildren(el("li", { className: "muted" }, "None sampled."));
    }

    function disagreement(sample) {
      return el(
        "li",
        {},
        el("div", {}, `outputs that differ: ${sample.outputs.join(", ")}`),
        el("div", { className: "muted" }, `inputs: ${tensors(sample.inputs)}`),
        el("div", {}, `active: ${tensors(sample.active)}`),
        el("div", {}, `candidate: ${tensors(sample.candidate)}`),
      );
    }

    function tensors(byName) {
      return Object.entries(byName)
        .map(([tensor, value]) => {
          const shown = value.values.slice(0, SHOWN_VALUES).map(short).join(", ");
          const more = value.values.length > SHOWN_VALUES || value.truncated ? ", …" : "";
          return `${tensor} [${value.shape.join("×")}] ${shown}${more}`;
        })
        .join("; ");
    }

    function short(value) {
      return typeof value === "number" && !Number.isInteger(value) ? value.toPrecision(4) : String(value);
    }

    every(POLL_MS, refresh);
  }

  // ---- the policy form: mode, weights (a slider between two versions, a number per READY version), shadow, guard

  function initEditor(root, latest, el) {
    const form = root.querySelector("#traffic-form");
    if (!form) return null;
    const modeSelect = form.querySelector("#traffic-mode");
    const weightsBox = form.querySelector("#traffic-weights");
    const sliderBox = form.querySelector("#traffic-slider-box");
    const slider = form.querySelector("#traffic-slider");
    const candidateSelect = form.querySelector("#traffic-candidate");
    const share = form.querySelector("#traffic-share");
    const guard = {
      rollback_error_rate: form.querySelector("#traffic-error-rate"),
      rollback_p99_ms: form.querySelector("#traffic-p99"),
      rollback_window_seconds: form.querySelector("#traffic-window"),
      rollback_min_requests: form.querySelector("#traffic-min-requests"),
    };
    let edited = false; // changes not saved yet: the polling leaves the form alone
    let pair = null; // [left, right]: the versions the slider shares 100% between

    function weightInput(version) {
      return weightsBox.querySelector(`input[data-version="${version}"]`);
    }

    function weightOf(version) {
      const input = weightInput(version);
      return input ? Number(input.value) || 0 : 0;
    }

    function fill(policy) {
      const data = latest();
      modeSelect.value = policy.mode;
      weightInputs(policy.mode === "canary" ? policy.weights : defaultWeights());
      const others = data.ready_versions.filter((v) => v !== data.active_version);
      const choices = [...new Set([...others, ...(policy.candidate === null ? [] : [policy.candidate])])];
      candidateSelect.replaceChildren(...choices.map((v) => el("option", { value: v }, `v${v}`)));
      if (choices.length) candidateSelect.value = String(policy.candidate ?? choices[choices.length - 1]);
      share.value = policy.shadow_share;
      for (const [field, input] of Object.entries(guard)) input.value = policy[field] ?? "";
      showMode();
    }

    /* A canary's starting point: the active version 90, the newest other READY version 10. */
    function defaultWeights() {
      const { active_version: active, ready_versions: ready } = latest();
      const others = ready.filter((v) => v !== active);
      const weights = {};
      if (active !== null) weights[active] = 90;
      if (others.length) weights[others[others.length - 1]] = 10;
      return weights;
    }

    function weightInputs(weights) {
      const { active_version: active, ready_versions: ready } = latest();
      const versions = [...new Set([...ready, ...Object.keys(weights).map(Number)])].sort((a, b) => a - b);
      weightsBox.replaceChildren(
        ...versions.map((v) =>
          el(
            "label",
            { className: "traffic-weight" },
            `v${v}${v === active ? " (active)" : ""}`,
            el("input", {
              type: "number",
              min: "0",
              step: "any",
              value: String(weights[v] ?? 0),
              dataset: { version: v },
              "aria-label": `weight of version ${v}`,
            }),
          ),
        ),
      );
      choosePair();
    }

    /* The slider moves between the active version and the other one with the most weight (the newest on a tie). */
    function choosePair() {
      const versions = [...weightsBox.querySelectorAll("input")].map((input) => Number(input.dataset.version));
      const active = latest().active_version;
      const left = versions.includes(active) ? active : versions[0];
      let right;
      for (const v of versions) {
        if (v === left) continue;
        if (right === undefined || weightOf(v) > weightOf(right) || (weightOf(v) === weightOf(right) && v > right)) right = v;
      }
      pair = right === undefined ? null : [left, right];
      sliderBox.hidden = pair === null;
      syncSlider();
    }

    function syncSlider() {
      if (!pair) return;
      const total = weightOf(pair[0]) + weightOf(pair[1]);
      // the thumb divides the bar as the versions share the requests: the left version's share left of it
      slider.value = String(total > 0 ? Math.round((100 * weightOf(pair[0])) / total) : 100);
      sliderLabels();
    }

    function sliderLabels() {
      const value = Number(slider.value);
      form.querySelector("#traffic-slider-left").textContent = `v${pair[0]} ${value}%`;
      form.querySelector("#traffic-slider-right").textContent = `v${pair[1]} ${100 - value}%`;
      slider.setAttribute("aria-valuetext", `version ${pair[0]}: ${value}%, version ${pair[1]}: ${100 - value}%`);
    }

    function showMode() {
      const mode = modeSelect.value;
      form.querySelector("#traffic-canary").hidden = mode !== "canary";
      form.querySelector("#traffic-shadow").hidden = mode !== "shadow";
      form.querySelector("#traffic-guard").hidden = mode === "active";
    }

    slider.addEventListener("input", () => {
      if (!pair) return;
      edited = true;
      const value = Number(slider.value);
      weightInput(pair[0]).value = String(value);
      weightInput(pair[1]).value = String(100 - value);
      sliderLabels();
    });
    weightsBox.addEventListener("input", () => {
      edited = true;
      syncSlider();
    });
    modeSelect.addEventListener("change", () => {
      if (!latest()) return; // the first answer fills the form; nothing to start from before it
      edited = true;
      if (modeSelect.value === "canary" && ![...weightsBox.querySelectorAll("input")].some((i) => Number(i.value) > 0)) {
        weightInputs(defaultWeights());
      }
      showMode();
    });
    for (const input of [candidateSelect, share, ...Object.values(guard)]) {
      input.addEventListener("input", () => {
        edited = true;
      });
    }

    return {
      show(data) {
        const promote = form.querySelector("#traffic-promote");
        promote.disabled = data.promotion_candidate === null;
        promote.textContent = data.promotion_candidate === null ? "Promote" : `Promote v${data.promotion_candidate}`;
        form.querySelector("#traffic-rollback").disabled = data.policy.mode === "active";
        if (!edited) fill(data.policy);
      },
      saved() {
        edited = false;
      },
      /* The policy the form describes, in the engine's JSON form (a canary keeps the slider's two versions and
       * every other version with weight; a version left out can be unloaded). */
      policy() {
        const mode = modeSelect.value;
        const policy = { mode };
        if (mode === "canary") {
          policy.weights = {};
          for (const input of weightsBox.querySelectorAll("input")) {
            const version = Number(input.dataset.version);
            const weight = Number(input.value) || 0;
            if (weight > 0 || (pair && pair.includes(version))) policy.weights[version] = weight;
          }
        }
        if (mode === "shadow") {
          policy.candidate = candidateSelect.value ? Number(candidateSelect.value) : null;
          policy.shadow_share = Number(share.value);
        }
        if (mode !== "active") {
          for (const [field, input] of Object.entries(guard)) {
            if (input.value !== "") policy[field] = Number(input.value);
          }
        }
        return policy;
      },
    };
  }

  // ---- the loaded versions side by side, live from the metrics stream

  function initLive(root, name, el) {
    const { format } = window.InferaLive;
    const rows = root.querySelector("#traffic-rows");
    let traffic = null;

    function mine(snapshot) {
      return (snapshot.models || []).filter((entry) => entry.name === name).sort((a, b) => a.version - b.version);
    }

    const charts = [];
    if (window.InferaCharts && window.Plotly) {
      const { LiveChart, layout, line, palette } = window.InferaCharts;
      const colorOf = palette();
      const stacked = (version) => ({ ...line(`v${version}`, colorOf(version)), stackgroup: "versions" });
      charts.push(
        new LiveChart("traffic-chart-throughput", layout("requests/s"), (snapshot) =>
          mine(snapshot).map((m) => ({ key: `v${m.version}`, y: m.success_per_s, trace: stacked(m.version) })),
        ),
        new LiveChart("traffic-chart-latency", layout("ms", { yaxis2: FAILURES_AXIS }), (snapshot) =>
          mine(snapshot).flatMap((m) => [
            ...["p50", "p99"].map((p) => ({
              key: `v${m.version} ${p}`,
              y: m.latency_ms ? m.latency_ms[p] : null,
              trace: line(`v${m.version} ${p}`, colorOf(m.version), { line: { dash: p === "p99" ? "dot" : "solid" } }),
            })),
            {
              key: `v${m.version} failures`,
              y: m.failure_per_s,
              trace: line(`v${m.version} failures/s`, colorOf(m.version), { yaxis: "y2", line: { dash: "dash" } }),
            },
          ]),
        ),
      );
    }

    function roleOf(version) {
      if (!traffic) return "";
      const roles = [];
      if (version === traffic.active_version) roles.push("active");
      const policy = traffic.in_force || traffic.policy;
      if (policy.mode === "canary" && version in policy.weights) {
        const total = Object.values(policy.weights).reduce((a, b) => a + b, 0) || 1;
        roles.push(`canary ${percent(policy.weights[version] / total)}`);
      }
      if (policy.mode === "shadow" && version === policy.candidate) roles.push("shadow candidate");
      return roles.join(", ");
    }

    function onSnapshot(snapshot) {
      const entries = mine(snapshot);
      const total = entries.reduce((sum, m) => sum + m.success_per_s, 0);
      if (!entries.length) {
        rows.replaceChildren(el("tr", {}, el("td", { colspan: 7, className: "muted" }, "No version is loaded here.")));
      } else {
        rows.replaceChildren(
          ...entries.map((m) =>
            el(
              "tr",
              { dataset: { version: m.version } },
              el("td", {}, `v${m.version}`),
              el("td", { dataset: { field: "role" } }, roleOf(m.version)),
              el("td", { dataset: { field: "throughput" } }, format(m.success_per_s, "success_per_s")),
              el("td", { dataset: { field: "share" } }, total > 0 ? percent(m.success_per_s / total) : "–"),
              el("td", {}, format(m.latency_ms ? m.latency_ms.p50 : null, "p50")),
              el("td", {}, format(m.latency_ms ? m.latency_ms.p99 : null, "p99")),
              el("td", { dataset: { field: "failures" } }, format(m.failure_per_s, "failure_per_s")),
            ),
          ),
        );
      }
      for (const chart of charts) chart.extend(snapshot, CHART_POINTS);
      root.dataset.snapshots = String(Number(root.dataset.snapshots || 0) + 1);
    }

    document.addEventListener("infera:snapshot", (event) => onSnapshot(event.detail));
    return {
      roles(data) {
        traffic = data;
        for (const row of rows.querySelectorAll("tr[data-version]")) {
          row.querySelector('[data-field="role"]').textContent = roleOf(Number(row.dataset.version));
        }
      },
    };
  }

  function start() {
    const root = document.getElementById("traffic");
    const page = document.querySelector('[data-page="model-detail"]');
    if (root && page && window.InferaRegistry) initTraffic(root, page.dataset.model);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
