/* The overview (home page), live: figures, devices and sparklines from /ws/metrics/, states from the page itself.
 *
 * The socket (InferaLive.MetricsSocket, ?history=1) brings a backlog of five minutes of snapshots with the hour's
 * closed minutes, then a snapshot a second: the whole server's figures now (`server`), each GPU or the CPU, each
 * model card's numbers and sparkline (requests/s, an SVG polyline), and, once a minute, the minute that closed and
 * the hour's figures for the hour chart (Plotly). The minute in progress is drawn as it goes (a paler bar, its
 * requests so far from the snapshots' figures), so the chart is never blank while traffic flows; with no request in
 * the hour the chart says so. Every REFRESH_MS the page fetches itself and swaps the parts
 * marked [data-refresh] that changed (model states and reasons, counts, recent audit events), so one template draws
 * them; the cards and the device panel are swapped only when their signature (names, states, reasons; which
 * devices) changed.
 */
(function () {
  "use strict";

  const root = document.getElementById("overview");
  if (!root) return;
  const { MetricsSocket, byModel, fill, format } = window.InferaLive;
  const { layout, PLOT_CONFIG } = window.InferaCharts;
  const stateLabel = document.getElementById("connection-state");
  const SPARK_SECONDS = 300;
  const REFRESH_MS = 5000;
  const MINUTE_MS = 60000;
  const HOUR_MS = 60 * MINUTE_MS;
  const STATE_TEXT = { connecting: "connecting…", live: "live", refused: "not allowed" };

  const series = new Map(); // model name -> [requests/s, ...] of the last SPARK_SECONDS snapshots
  let lastSnapshot = null;

  // ---- the whole server's figures and the devices

  function formatted(value, kind) {
    if (value === null || value === undefined) return "–";
    if (kind === "percent") return `${(value * 100).toFixed(1)}%`;
    return format(value, kind === "rate" ? "success_per_s" : "p99");
  }

  function showFigures(figures, when) {
    if (!figures) return;
    for (const cell of root.querySelectorAll(`[data-figure][data-when="${when}"]`)) {
      const value = figures[cell.dataset.figure];
      cell.textContent = formatted(value, cell.dataset.kind);
      cell.dataset.value = value === null || value === undefined ? "" : String(value);
    }
  }

  function bytes(count) {
    const units = ["bytes", "KB", "MB", "GB", "TB"];
    let value = count;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
  }

  function showDevices(devices) {
    if (!devices) return;
    for (const box of root.querySelectorAll(".device[data-device]")) {
      const [kind, index] = box.dataset.device.split(":");
      const device = kind === "gpu" ? (devices.gpus || []).find((gpu) => String(gpu.index) === index) : devices.cpu;
      if (!device) continue;
      const used = device.memory_used_bytes;
      const total = device.memory_total_bytes;
      const utilization = device.utilization;
      box.querySelector('[data-field="utilization"]').value = utilization || 0;
      box.querySelector('[data-text="utilization"]').textContent =
        utilization === null || utilization === undefined ? "–" : `${Math.round(utilization * 100)}%`;
      box.querySelector('[data-field="memory"]').value = total ? used / total : 0;
      box.querySelector('[data-text="memory"]').textContent = total ? `${bytes(used)} of ${bytes(total)}` : "–";
    }
  }

  // ---- sparklines: one SVG polyline per card, scaled to its own peak

  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 240;
  const HEIGHT = 40;

  function record(snapshot) {
    const models = byModel(snapshot);
    for (const name of new Set([...series.keys(), ...models.keys()])) {
      const values = series.get(name) || [];
      const entry = models.get(name);
      values.push(entry ? entry.success_per_s + entry.failure_per_s : 0);
      if (values.length > SPARK_SECONDS) values.splice(0, values.length - SPARK_SECONDS);
      series.set(name, values);
    }
  }

  function drawSparkline(box) {
    const values = series.get(box.dataset.sparkline) || [];
    let svg = box.querySelector("svg");
    if (!svg) {
      svg = document.createElementNS(SVG, "svg");
      svg.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
      svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("aria-hidden", "true");
      svg.append(document.createElementNS(SVG, "polyline"));
      box.append(svg);
    }
    const peak = Math.max(...values, 0);
    const step = WIDTH / Math.max(SPARK_SECONDS - 1, 1);
    const offset = WIDTH - step * (values.length - 1);
    const points = values.map((value, index) => {
      const y = peak > 0 ? HEIGHT - 2 - (value / peak) * (HEIGHT - 4) : HEIGHT - 2;
      return `${(offset + index * step).toFixed(1)},${y.toFixed(1)}`;
    });
    svg.firstChild.setAttribute("points", points.join(" "));
    box.dataset.points = String(values.length);
    box.dataset.peak = String(peak);
  }

  function drawSparklines() {
    for (const box of root.querySelectorAll("[data-sparkline]")) drawSparkline(box);
  }

  // ---- the hour chart: requests/s and failures/s per minute, p99 on the right; the minute in progress so far

  const hourElement = document.getElementById("hour-chart");
  const hourLayout = layout("requests/s", {
    margin: { l: 50, r: 50, t: 8, b: 30 },
    xaxis: { type: "date", tickformat: "%H:%M" },
    yaxis2: { title: { text: "p99 ms" }, overlaying: "y", side: "right", rangemode: "tozero", showgrid: false },
    barmode: "overlay",
    bargap: 0.15,
  });
  const EMPTY_HOUR = "No client requests in the last hour: send one from a model's Try it, /v2, gRPC or /v1.";
  const minutes = [];
  let current = null; // the minute in progress, from the snapshots: {t, requests, failures, seconds}

  /* Count a snapshot's client requests in the minute of its time (the sampler closes minutes by the same clock). */
  function countInMinute(snapshot) {
    const t = Math.floor(snapshot.t / MINUTE_MS) * MINUTE_MS;
    if (!current || current.t !== t) current = { t, requests: 0, failures: 0, seconds: 0 };
    const seconds = snapshot.interval || 0;
    const server = snapshot.server || {};
    current.requests += (server.requests_per_s || 0) * seconds;
    current.failures += (server.failures_per_s || 0) * seconds;
    current.seconds += seconds;
  }

  /* The closed minutes, then the minute in progress (its rates so far) unless it has closed meanwhile. */
  function shownMinutes() {
    const open = current && current.seconds > 0 && !minutes.some((m) => m.t === current.t);
    if (!open) return minutes.map((m) => ({ ...m, open: false }));
    const rate = (count) => Math.round((1000 * count) / current.seconds) / 1000;
    return [...minutes.map((m) => ({ ...m, open: false })),
      { t: current.t, requests_per_s: rate(current.requests), failures_per_s: rate(current.failures), p99_ms: null, open: true }];
  }

  function drawHour() {
    // bars stand at the middle of their minute, on an axis that always spans the last hour
    const shown = shownMinutes();
    const x = shown.map((minute) => new Date(minute.t + MINUTE_MS / 2));
    const end = Math.max(Date.now(), ...shown.map((minute) => minute.t + MINUTE_MS));
    hourLayout.xaxis.range = [new Date(end - HOUR_MS), new Date(end)];
    const any = shown.some((minute) => minute.requests_per_s > 0 || minute.failures_per_s > 0);
    hourLayout.annotations = any ? [] : [{ text: EMPTY_HOUR, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }];
    const opacity = shown.map((minute) => (minute.open ? 0.45 : 1));
    const when = shown.map((minute) => (minute.open ? "this minute so far" : "minute"));
    const bar = { type: "bar", x, width: MINUTE_MS * 0.8, customdata: when, hovertemplate: "%{y:.3~f}/s (%{customdata})" };
    Plotly.react(
      hourElement,
      [
        { ...bar, name: "requests/s", y: shown.map((m) => m.requests_per_s), marker: { color: "#2f6fdb", opacity } },
        { ...bar, name: "failures/s", y: shown.map((m) => m.failures_per_s), marker: { color: "#c0392b", opacity } },
        {
          type: "scatter", mode: "lines+markers", name: "p99 (slowest model)", x, yaxis: "y2",
          y: shown.map((m) => m.p99_ms), line: { color: "#e07b24", width: 2 },
        },
      ],
      hourLayout,
      PLOT_CONFIG,
    );
    hourElement.dataset.minutes = String(minutes.length);
    hourElement.dataset.open = shown.length > minutes.length ? "true" : "false";
    hourElement.dataset.empty = any ? "false" : "true";
  }

  // ---- the stream

  function onBacklog(message) {
    series.clear();
    current = null;
    for (const snapshot of message.snapshots) {
      record(snapshot);
      countInMinute(snapshot);
    }
    const last = message.snapshots[message.snapshots.length - 1];
    if (last) onNewest(last);
    minutes.splice(0, minutes.length, ...(message.minutes || []));
    drawHour();
    showFigures(message.hour, "hour");
    drawSparklines();
  }

  function onNewest(snapshot) {
    lastSnapshot = snapshot;
    const note = document.getElementById("sampler-note");
    if (note) note.hidden = true;
    showFigures(snapshot.server, "now");
    showDevices(snapshot.devices);
    fill(snapshot, root);
  }

  function onSnapshot(snapshot) {
    record(snapshot);
    countInMinute(snapshot);
    onNewest(snapshot);
    drawSparklines();
    if (snapshot.minute) {
      minutes.push(snapshot.minute);
      while (minutes.length && minutes[0].t <= snapshot.minute.t - HOUR_MS) minutes.shift();
    }
    drawHour();
    if (snapshot.hour) showFigures(snapshot.hour, "hour");
  }

  const socket = new MetricsSocket({
    params: () => ({ window: SPARK_SECONDS, history: 1 }),
    onMessage: (message) => {
      if (message.type === "backlog") onBacklog(message);
      else if (message.type === "snapshot") onSnapshot(message.snapshot);
    },
    onState: (state, detail) => {
      stateLabel.dataset.state = state;
      stateLabel.textContent =
        state === "reconnecting" ? `reconnecting in ${detail.inSeconds} s…` : STATE_TEXT[state] || state;
    },
  }).start();

  // ---- states, counts and audit events: the page fetches itself and swaps what changed

  async function refresh() {
    let response;
    try {
      response = await fetch(root.dataset.refreshUrl, { credentials: "same-origin", headers: { Accept: "text/html" } });
    } catch (error) {
      return; // the server is away: the socket's state says so
    }
    if (!response.ok || new URL(response.url).pathname !== new URL(root.dataset.refreshUrl, window.location.href).pathname) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const part of root.querySelectorAll("[data-refresh][id]")) {
      const replacement = fresh.getElementById(part.id);
      if (!replacement) continue;
      const signature = part.dataset.signature;
      if (signature !== undefined ? signature === replacement.dataset.signature : part.outerHTML === replacement.outerHTML) {
        continue;
      }
      if (part.contains(document.activeElement)) continue; // never pull the focus from under the keyboard
      part.replaceWith(document.adoptNode(replacement));
      if (part.id === "model-cards") {
        drawSparklines();
        if (lastSnapshot) fill(lastSnapshot, root);
      }
      if (part.id === "overview-devices" && lastSnapshot) showDevices(lastSnapshot.devices);
    }
  }

  setInterval(refresh, REFRESH_MS);
  window.inferaOverview = { socket, series, minutes, refresh };
})();
