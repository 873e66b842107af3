/* The monitoring page's pipeline panel: an ensemble and its steps together, drawn from `snapshot.pipeline`.
 *
 * The metrics consumer adds `pipeline` to each snapshot when the page selects an ensemble (console/monitoring/
 * pipelines.py): the ensemble's numbers, each step's, and the time outside every step. InferaPipeline.PipelinePanel
 * shows it as a table of the newest numbers and four live charts (throughput, latency, queue vs compute per step,
 * and where the ensemble's time goes: each step's mean latency stacked under the ensemble's mean).
 * show(pipeline or null), rebuild(snapshots) and extend(snapshot, maxPoints) follow the page's LiveCharts.
 */
(function () {
  "use strict";

  const { LiveChart, layout, line, PALETTE } = window.InferaCharts;
  const { format } = window.InferaLive;
  const ENSEMBLE_COLOR = "#1f2937";
  const OUTSIDE_COLOR = "#aab4bf";
  const RATE = "success_per_s"; // how InferaLive.format writes any rate
  const COLUMNS = ["success_per_s", "from_ensembles_per_s", "p50", "p99", "queue_ms", "compute_ms",
                   "mean_latency_ms", "share"];

  const stepName = (step) => `step ${step.index} · ${step.model}`;
  const stepColor = (step) => PALETTE[step.index % PALETTE.length];
  const ensembleName = (pipeline) => `${pipeline.model} (ensemble)`;
  const shapeOf = (pipeline) => JSON.stringify([pipeline.model, pipeline.steps.map((s) => [s.index, s.model, s.version])]);

  /* A LiveChart series over `snapshot.pipeline` (no points in a snapshot without one). */
  const overPipeline = (points) => (snapshot) => (snapshot.pipeline ? points(snapshot.pipeline) : []);

  const percentile = (numbers, p) => (numbers.latency_ms ? numbers.latency_ms[p] : null);

  const SERIES = {
    "chart-pipeline-throughput": [layout("requests/s"), overPipeline((pipeline) => [
      { key: "ensemble", y: pipeline.ensemble.success_per_s,
        trace: line(ensembleName(pipeline), ENSEMBLE_COLOR, { line: { width: 3 } }) },
      ...pipeline.steps.map((step) => ({ key: `step ${step.index}`, y: step.success_per_s,
                                         trace: line(stepName(step), stepColor(step)) })),
    ])],
    "chart-pipeline-latency": [layout("ms"), overPipeline((pipeline) =>
      [{ ...pipeline.ensemble, index: "ensemble" }, ...pipeline.steps].flatMap((numbers) => {
        const ensemble = numbers.index === "ensemble";
        const name = ensemble ? ensembleName(pipeline) : stepName(numbers);
        const color = ensemble ? ENSEMBLE_COLOR : stepColor(numbers);
        return [
          { key: `${numbers.index} p50`, y: percentile(numbers, "p50"), trace: line(`${name} p50`, color) },
          { key: `${numbers.index} p99`, y: percentile(numbers, "p99"),
            trace: line(`${name} p99`, color, { line: { dash: "dot" } }) },
        ];
      }),
    )],
    "chart-pipeline-queue-compute": [layout("ms per request"), overPipeline((pipeline) =>
      pipeline.steps.flatMap((step) => [
        { key: `${step.index} queue`, y: step.queue_ms,
          trace: line(`${stepName(step)} queue`, stepColor(step), { line: { dash: "dot" } }) },
        { key: `${step.index} compute`, y: step.compute_ms, trace: line(`${stepName(step)} compute`, stepColor(step)) },
      ]),
    )],
    "chart-pipeline-time": [layout("ms per request", { barmode: "stack", bargap: 0.1 }), overPipeline((pipeline) => [
      ...pipeline.steps.map((step) => ({ key: `step ${step.index}`, y: step.mean_latency_ms,
                                         trace: { type: "bar", name: stepName(step), marker: { color: stepColor(step) } } })),
      { key: "outside", y: pipeline.outside_steps_ms,
        trace: { type: "bar", name: "outside the steps", marker: { color: OUTSIDE_COLOR } } },
      { key: "ensemble", y: pipeline.ensemble.mean_latency_ms,
        trace: line(`${ensembleName(pipeline)} mean`, ENSEMBLE_COLOR, { line: { width: 3 } }) },
    ])],
  };

  function cell(row, field, text) {
    const td = row.insertCell();
    if (field) td.dataset.field = field;
    td.textContent = text;
    return td;
  }

  function versionText(step) {
    if (step.version !== null) return `v${step.version} (pinned)`;
    return step.versions && step.versions.length ? `served (v${step.versions.join(", v")})` : "served";
  }

  function valueText(numbers, field, ensembleMs) {
    if (field === "p50" || field === "p99") return format(percentile(numbers, field), field);
    if (field.endsWith("_per_s")) return format(numbers[field], RATE);
    if (field === "share") {
      const ms = numbers.mean_latency_ms;
      const share = "share" in numbers ? numbers.share : ms !== null && ensembleMs ? ms / ensembleMs : null;
      return share === null ? "–" : `${Math.round(share * 100)}%`;
    }
    return format(numbers[field], field);
  }

  class PipelinePanel {
    constructor(root) {
      this.root = root;
      this.body = root.querySelector("#pipeline-steps tbody");
      this.title = root.querySelector("#pipeline-name");
      this.charts = null; // made when first shown: Plotly sizes a chart by its visible container
      this.shape = null;
    }

    /* Lay out `pipeline` (from a backlog's description or a snapshot), or hide the panel for null. */
    show(pipeline) {
      this.root.hidden = !pipeline;
      this.shape = pipeline ? shapeOf(pipeline) : null;
      if (!pipeline) return;
      this.root.dataset.model = pipeline.model;
      this.title.textContent = pipeline.model;
      this.body.replaceChildren();
      const rows = [["ensemble", pipeline.model, "–", "ensemble"],
                    ...pipeline.steps.map((s) => [String(s.index), s.model, versionText(s), `step ${s.index}`]),
                    ["", "outside the steps", "", "outside"]];
      for (const [step, model, version, key] of rows) {
        const row = this.body.insertRow();
        row.dataset.row = key;
        cell(row, null, step);
        cell(row, "model", model);
        cell(row, "version", version);
        for (const field of COLUMNS) cell(row, field, "–");
      }
      if (!this.charts) {
        this.charts = Object.entries(SERIES).map(([id, [plotLayout, series]]) => new LiveChart(id, plotLayout, series));
      }
    }

    rebuild(snapshots) {
      if (!this.shape) return;
      for (const chart of this.charts) chart.rebuild(snapshots);
      const last = snapshots[snapshots.length - 1];
      if (last && last.pipeline) this.fill(last.pipeline);
    }

    extend(snapshot, maxPoints) {
      if (!snapshot.pipeline) return;
      if (shapeOf(snapshot.pipeline) !== this.shape) { // loaded after the page asked, or its steps changed
        this.show(snapshot.pipeline);
        this.rebuild([snapshot]);
        return;
      }
      for (const chart of this.charts) chart.extend(snapshot, maxPoints);
      this.fill(snapshot.pipeline);
    }

    /* The table's numbers from one snapshot's pipeline. */
    fill(pipeline) {
      const ensembleMs = pipeline.ensemble.mean_latency_ms;
      const rows = { ensemble: { ...pipeline.ensemble, share: ensembleMs ? 1 : null },
                     outside: { mean_latency_ms: pipeline.outside_steps_ms } };
      for (const step of pipeline.steps) rows[`step ${step.index}`] = step;
      for (const row of this.body.rows) {
        const numbers = rows[row.dataset.row];
        if (!numbers) continue;
        for (const td of row.querySelectorAll("td[data-field]")) {
          const field = td.dataset.field;
          if (field === "version" && numbers.index !== undefined) td.textContent = versionText(numbers);
          else if (COLUMNS.includes(field)) td.textContent = valueText(numbers, field, ensembleMs);
        }
      }
      this.root.dataset.updates = String(Number(this.root.dataset.updates || 0) + 1);
    }
  }

  window.InferaPipeline = { PipelinePanel };
})();
