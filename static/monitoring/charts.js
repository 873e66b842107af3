/* Live Plotly charts for any console page (the monitoring page, a model's traffic panel).
 *
 * InferaCharts.LiveChart(element or id, layout, series, options): `series(snapshot)` lists its points as
 * {key, y, trace, fixed}; `rebuild(snapshots)` draws a backlog once, `extend(snapshot, maxPoints)` grows every trace
 * in place (Plotly.extendTraces) and adds traces as new keys show up.
 * Charts are made for reading: at most `options.top` (8) keys get a trace of their own, the busiest when they first
 * show up, and the rest are folded into one "others" trace (summed, or their worst with `fold: "max"`); a point
 * marked `fixed` (a total, failures) always has its own. `options.smooth` averages each trace over that many
 * points (rates at low traffic read as a level, not a comb of 0/1 spikes). While every point is empty the chart
 * says why (`options.empty`). `layout(yTitle, extra)` and `line(name, color, extra)`
 * are the console's chart and trace defaults; `countAxis(title)` a y axis of whole numbers, and an overlaying axis
 * (`yaxis2`) gets ticks of its own, nice numbers, not the other axis's grid. Needs vendor/plotly.min.js loaded before it runs.
 *
 * Charts follow the browser's light or dark scheme: every layout made by `layout()` (or passed to `themed()`) takes
 * its text and grid colors from the page's CSS (--ink, --chart-grid) on a transparent background, and is recolored in
 * place, with every chart on the page, when the scheme changes.
 */
(function () {
  "use strict";

  const PALETTE = ["#2f6fdb", "#e07b24", "#1b9e5a", "#c0392b", "#8e44ad", "#16a2b8", "#b8860b", "#5d6d7e"];
  const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  const themedLayouts = [];
  // time ticks as precise as the span needs: seconds within minutes, minutes within hours, days beyond
  const TIME_TICKS = [
    { dtickrange: [null, 60000], value: "%H:%M:%S" },
    { dtickrange: [60000, 86400000], value: "%H:%M" },
    { dtickrange: [86400000, null], value: "%b %d" },
  ];
  const TOP = 8;
  const OTHERS = "others";
  const EMPTY = "Nothing in this window: no model has answered a request yet (try one on its page).";
  const AXIS = /^[xy]axis\d*$/;

  function colors() {
    const style = getComputedStyle(document.documentElement);
    return {
      ink: style.getPropertyValue("--ink").trim() || "#1d2733",
      grid: style.getPropertyValue("--chart-grid").trim() || "#d8dee6",
    };
  }

  /* `plotLayout` colored for the page's scheme, changed in place (and again whenever the scheme changes). */
  function themed(plotLayout) {
    const { ink, grid } = colors();
    plotLayout.paper_bgcolor = "rgba(0,0,0,0)";
    plotLayout.plot_bgcolor = "rgba(0,0,0,0)";
    plotLayout.font = { ...(plotLayout.font || {}), color: ink };
    for (const key of Object.keys(plotLayout)) {
      if (!AXIS.test(key)) continue;
      plotLayout[key] = { ...plotLayout[key], gridcolor: grid, zerolinecolor: grid, linecolor: grid };
      // plotly.js 4 puts an overlaying axis's ticks on the other axis's grid ("sync": 0.275, 0.551): nice ticks instead
      if (plotLayout[key].overlaying && !plotLayout[key].tickmode) Object.assign(plotLayout[key], { tickmode: "auto", showgrid: false });
    }
    if (!themedLayouts.includes(plotLayout)) themedLayouts.push(plotLayout);
    return plotLayout;
  }

  function layout(yTitle, extra = {}) {
    return themed({
      margin: { l: 50, r: 50, t: 8, b: 30 },
      xaxis: { type: "date", tickformatstops: TIME_TICKS },
      yaxis: { title: { text: yTitle }, rangemode: "tozero" },
      legend: { orientation: "h", y: -0.18 },
      showlegend: true,
      uirevision: "keep", // zoom and hidden traces survive rebuilds
      ...extra,
    });
  }

  /* A y axis of counts (requests waiting, streams, sequences): whole numbers only, 0 to at least 4 (0 1 2 3 4, never
   * 0.2 0.4 ...), five ticks at most. */
  function countAxis(title) {
    return { title: { text: title }, rangemode: "tozero", tickformat: ",d", nticks: 5, autorangeoptions: { include: [0, 4] } };
  }

  /* Recolor every layout made here and every chart drawn on the page for the scheme now in force. */
  function retheme() {
    for (const plotLayout of themedLayouts) themed(plotLayout);
    const { ink, grid } = colors();
    for (const element of document.querySelectorAll(".js-plotly-plot")) {
      const update = { "font.color": ink, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)" };
      for (const key of Object.keys(element.layout || {})) {
        if (AXIS.test(key)) Object.assign(update, { [`${key}.gridcolor`]: grid, [`${key}.zerolinecolor`]: grid, [`${key}.linecolor`]: grid });
      }
      Plotly.relayout(element, update);
    }
  }

  if (window.matchMedia) window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", retheme);

  function line(name, color, { line: lineStyle = {}, ...extra } = {}) {
    return { type: "scatter", mode: "lines", name, line: { color, width: 2, ...lineStyle }, ...extra };
  }

  /* One color per name, in order of first use. */
  function palette() {
    const colors = new Map();
    return (name) => {
      if (!colors.has(name)) colors.set(name, PALETTE[colors.size % PALETTE.length]);
      return colors.get(name);
    };
  }

  class LiveChart {
    constructor(element, plotLayout, series, { top = TOP, fold = "sum", smooth = 1, empty = EMPTY } = {}) {
      this.element = typeof element === "string" ? document.getElementById(element) : element;
      this.plotLayout = plotLayout;
      this.series = series;
      Object.assign(this, { top, fold, smooth, empty });
      this.keys = [];
      this.own = new Set(); // keys with a trace of their own; the rest go to "others"
      this.recent = new Map(); // key -> its last `smooth` values
      this.seen = false; // whether any point had a value
      Plotly.newPlot(this.element, [], plotLayout, PLOT_CONFIG);
      this.showEmpty();
    }

    /* The snapshot's points, the quiet ones folded into "others" and each smoothed over its last values. A point's
     * `group` (a model, for its p50/p95/p99 lines) gets or misses a slot as one. */
    points(snapshot) {
      const raw = this.series(snapshot);
      const group = (point) => point.group || point.key;
      // a few keys all get a line; among many, only one with a value takes a free slot (the idle stay in "others")
      const crowded = new Set(raw.filter((p) => !p.fixed).map(group)).size > this.top;
      const fresh = raw.filter((p) => !p.fixed && !this.own.has(group(p)) && (p.y || (!crowded && p.y !== null)));
      fresh.sort((x, y) => (y.y || 0) - (x.y || 0));
      for (const point of fresh) if (this.own.size < this.top) this.own.add(group(point));
      const kept = [];
      let others = null;
      for (const point of raw) {
        if (point.fixed || this.own.has(group(point))) kept.push(point);
        else if (point.y) others = others === null ? point.y : this.fold === "max" ? Math.max(others, point.y) : others + point.y;
      }
      if (others !== null || this.keys.includes(OTHERS)) {
        const name = `${OTHERS} (choose one with the model filter)`;
        kept.push({ key: OTHERS, y: others, trace: line(name, "#8796a8", { line: { dash: "dashdot" } }) });
      }
      if (kept.some((point) => !point.fixed && point.y)) this.seen = true;
      return kept.map((point) => ({ ...point, y: this.smoothed(point.key, point.y) }));
    }

    smoothed(key, y) {
      if (this.smooth <= 1 || y === null || y === undefined) return y;
      const values = this.recent.get(key) || [];
      values.push(y);
      if (values.length > this.smooth) values.shift();
      this.recent.set(key, values);
      return values.reduce((a, b) => a + b, 0) / values.length;
    }

    /* While nothing has a value, the chart says why instead of drawing empty axes. */
    showEmpty() {
      const annotations = this.seen ? [] : [{ text: this.empty, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }];
      this.element.dataset.empty = this.seen ? "false" : "true";
      if ((this.plotLayout.annotations || []).length === annotations.length) return;
      this.plotLayout.annotations = annotations;
      Plotly.relayout(this.element, { annotations });
    }

    rebuild(snapshots) {
      const traces = new Map();
      const keys = [];
      this.recent.clear();
      this.seen = false;
      for (const snapshot of snapshots) {
        const x = new Date(snapshot.t);
        const present = new Map(this.points(snapshot).map((point) => [point.key, point]));
        for (const [key, point] of present) {
          if (!traces.has(key)) {
            traces.set(key, { ...point.trace, x: [], y: [] });
            keys.push(key);
          }
        }
        for (const key of keys) {
          const trace = traces.get(key);
          trace.x.push(x);
          trace.y.push(present.has(key) ? present.get(key).y : null); // a gap, not a line across it
        }
      }
      this.keys = keys;
      this.plotLayout.annotations = [];
      Plotly.react(this.element, keys.map((key) => traces.get(key)), this.plotLayout, PLOT_CONFIG);
      this.showEmpty();
    }

    extend(snapshot, maxPoints) {
      const x = new Date(snapshot.t);
      const points = this.points(snapshot);
      const present = new Map(points.map((point) => [point.key, point]));
      if (this.keys.length) {
        Plotly.extendTraces(
          this.element,
          { x: this.keys.map(() => [x]), y: this.keys.map((key) => [present.has(key) ? present.get(key).y : null]) },
          this.keys.map((_, index) => index),
          maxPoints,
        );
      }
      const fresh = points.filter((point) => !this.keys.includes(point.key));
      if (fresh.length) {
        Plotly.addTraces(this.element, fresh.map((point) => ({ ...point.trace, x: [x], y: [point.y] })));
        this.keys.push(...fresh.map((point) => point.key));
      }
      this.showEmpty();
    }
  }

  window.InferaCharts = { LiveChart, layout, countAxis, themed, line, palette, PALETTE, PLOT_CONFIG, TIME_TICKS };
})();
