/* Live Plotly charts for any console page (the monitoring page, a model's traffic panel).
 *
 * InferaCharts.LiveChart(element or id, layout, series): `series(snapshot)` lists its points as {key, y, trace};
 * `rebuild(snapshots)` draws a backlog once, `extend(snapshot, maxPoints)` grows every trace in place
 * (Plotly.extendTraces) and adds traces as new keys show up. `layout(yTitle, extra)` and `line(name, color, extra)`
 * are the console's chart and trace defaults. Needs vendor/plotly.min.js loaded before it runs.
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
      if (AXIS.test(key)) plotLayout[key] = { ...plotLayout[key], gridcolor: grid, zerolinecolor: grid, linecolor: grid };
    }
    if (!themedLayouts.includes(plotLayout)) themedLayouts.push(plotLayout);
    return plotLayout;
  }

  function layout(yTitle, extra = {}) {
    return themed({
      margin: { l: 50, r: 50, t: 8, b: 30 },
      xaxis: { type: "date", tickformat: "%H:%M:%S" },
      yaxis: { title: { text: yTitle }, rangemode: "tozero" },
      legend: { orientation: "h", y: -0.18 },
      showlegend: true,
      uirevision: "keep", // zoom and hidden traces survive rebuilds
      ...extra,
    });
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
    constructor(element, plotLayout, series) {
      this.element = typeof element === "string" ? document.getElementById(element) : element;
      this.plotLayout = plotLayout;
      this.series = series;
      this.keys = [];
      Plotly.newPlot(this.element, [], plotLayout, PLOT_CONFIG);
    }

    rebuild(snapshots) {
      const traces = new Map();
      const keys = [];
      for (const snapshot of snapshots) {
        const x = new Date(snapshot.t);
        const present = new Map(this.series(snapshot).map((point) => [point.key, point]));
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
      Plotly.react(this.element, keys.map((key) => traces.get(key)), this.plotLayout, PLOT_CONFIG);
    }

    extend(snapshot, maxPoints) {
      const x = new Date(snapshot.t);
      const points = this.series(snapshot);
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
    }
  }

  window.InferaCharts = { LiveChart, layout, themed, line, palette, PALETTE, PLOT_CONFIG };
})();
