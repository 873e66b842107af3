/* The token usage chart of the users page, a user's page and a token's page (templates/accounts/_usage_chart.html).
 *
 * It reads /api/usage/ (console/accounts/usage_chart.py: the series already cut to the biggest eight and "others",
 * each bar's start in ms) for the span and kind chosen, draws stacked bars with the console's chart defaults
 * (static/monitoring/charts.js: colors, the light or dark scheme, time ticks), says in the chart why it is empty,
 * and writes the span's totals under it in words. It reads again every REFRESH_MS while the page is shown.
 */
(function () {
  "use strict";

  const REFRESH_MS = 30000;
  const number = new Intl.NumberFormat(undefined, { notation: "compact", maximumFractionDigits: 1 });
  const card = document.getElementById("usage");
  if (!card) return;
  const element = document.getElementById("usage-chart");
  const summary = document.getElementById("usage-summary");
  const span = card.querySelector(".usage-span");
  const kind = card.querySelector(".usage-kind");
  const { layout, palette, PLOT_CONFIG } = window.InferaCharts;
  const plotLayout = layout("tokens", { barmode: "stack", bargap: 0.15, hovermode: "x unified" });

  function words(totals, spanWords) {
    const prompt = `${number.format(totals.prompt)} prompt tokens`;
    const cached = totals.cached ? ` (${number.format(totals.cached)} of them cached)` : "";
    return `${spanWords}: ${prompt}${cached} and ${number.format(totals.completion)} completion tokens.`;
  }

  function draw(answer) {
    const color = palette();
    const widthMs = answer.times.length > 1 ? answer.times[1] - answer.times[0] : 60000;
    const x = answer.times.map((t) => new Date(t + widthMs / 2)); // a bar stands at the middle of its time
    const traces = answer.series.map((series) => {
      const grey = series.key === "others" ? "#8796a8" : color(series.key);
      const name = `${series.name}: ${number.format(series.total)}`;
      return { type: "bar", name, marker: { color: grey }, x, y: series.values };
    });
    plotLayout.yaxis.title = { text: answer.unit };
    plotLayout.xaxis.range = [new Date(answer.times[0]), new Date(answer.times[answer.times.length - 1] + widthMs)];
    plotLayout.annotations = answer.empty
      ? [{ text: answer.empty, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }]
      : [];
    Plotly.react(element, traces, plotLayout, PLOT_CONFIG);
    element.dataset.empty = answer.empty ? "true" : "false";
    element.dataset.series = String(traces.length);
    const spanWords = span.options[span.selectedIndex].textContent;
    summary.textContent = answer.empty || words(answer.totals, spanWords);
  }

  async function refresh() {
    const query = new URLSearchParams(card.dataset.query || "");
    query.set("span", span.value);
    if (kind) query.set("kind", kind.value);
    try {
      const response = await fetch(`${card.dataset.url}?${query}`, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(`the server answered ${response.status}`);
      draw(await response.json());
    } catch (error) {
      summary.textContent = `Token usage could not be read (${error.message}); it is read again in ${REFRESH_MS / 1000} s.`;
    }
  }

  span.addEventListener("change", refresh);
  if (kind) kind.addEventListener("change", refresh);
  setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  refresh();
})();
