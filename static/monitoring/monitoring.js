/* The monitoring page: Plotly charts fed by /ws/metrics/ (through InferaLive.MetricsSocket from live.js).
 *
 * A backlog message (on connect, and after a change of model, window or split) rebuilds every chart once; each
 * snapshot after that extends every trace in place with Plotly.extendTraces, keeping one window of points.
 * "By version" splits the throughput, latency, queue/compute and pending charts into one trace per model version.
 * Selecting an ensemble (the "Pipelines" group) also shows it with its steps (InferaPipeline, pipeline.js).
 * In a cluster (replicas on Redis, or `serve --workers`) every chart shows the whole cluster, with a line per replica
 * in "Throughput by replica" and each replica's devices; the replica filter narrows the page to one of them.
 */
(function () {
  "use strict";

  const root = document.getElementById("monitoring");
  const stateLabel = document.getElementById("connection-state");
  const windowSelect = document.getElementById("window-select");
  const modelSelect = document.getElementById("model-select");
  const pipelineOptions = document.getElementById("pipeline-options");
  const modelOptions = document.getElementById("model-options");
  const splitToggle = document.getElementById("split-versions");
  const noGpuNote = document.getElementById("no-gpu-note");
  const deviceTitle = document.getElementById("device-title");
  const replicaFilter = document.getElementById("replica-filter");
  const replicaSelect = document.getElementById("replica-select");
  const replicasCard = document.getElementById("replicas-card");
  const answeredBy = document.getElementById("answered-by");
  const { MetricsSocket, byModel } = window.InferaLive;
  const CLIENT_PROTOCOLS = new Set(["http", "grpc"]); // how requests reach the server from outside
  const generationCards = document.querySelectorAll(".generation-card");

  const { LiveChart, layout, countAxis, line, palette } = window.InferaCharts;
  const panel = new window.InferaPipeline.PipelinePanel(document.getElementById("pipeline-panel"));
  const GIB = 1024 ** 3;
  const MIB = 1024 ** 2;

  let interval = 1;
  let windowSeconds = Number(windowSelect.value);
  // a deep link may name a model that is not loaded yet: it is selected once it shows up
  let model = new URL(window.location.href).searchParams.get("model") || modelSelect.value || null;
  let replica = new URL(window.location.href).searchParams.get("replica") || null;
  let replicaCount = 0; // replicas in the newest snapshot of the whole cluster
  let gpuLayout = null; // true: GPU panels, false: CPU panels, null: not known yet
  const knownModels = new Set([...modelSelect.options].map((o) => o.value).filter(Boolean));
  const colorOf = palette();
  let splitVersions = splitToggle.checked;

  /* What the per-model charts draw: each model with its versions merged, or each version apart ("name v2"). */
  function entries(snapshot) {
    if (!splitVersions) return [...byModel(snapshot).values()];
    return (snapshot.models || []).map((entry) => ({ ...entry, name: `${entry.name} v${entry.version}` }));
  }

  const DASH = { p50: "solid", p95: "dash", p99: "dot" };
  const SMOOTH = 5; // rates are averaged over 5 points: one request in a while reads as a level, not a spike

  /* Each replica's own figures, in a snapshot of the whole cluster (none in one replica's own snapshots). */
  function replicasOf(snapshot) {
    return snapshot.replicas || [];
  }

  const charts = {
    replicas: new LiveChart("chart-replicas", layout("requests/s"), (snapshot) => {
      const replicas = replicasOf(snapshot);
      if (!replicas.length) return [];
      const points = replicas.map((r) => ({ key: r.name, y: r.server.requests_per_s, trace: line(r.name, colorOf(`replica ${r.name}`)) }));
      points.push({ key: "total", y: snapshot.server.requests_per_s, fixed: true,
        trace: line("all replicas", "#1d2733", { line: { dash: "dot", width: 3 } }) });
      return points;
    }),
    throughput: new LiveChart("chart-throughput", layout("requests/s"), (snapshot) => {
      const models = entries(snapshot);
      const points = models.map((m) => ({ key: m.name, y: m.success_per_s, trace: line(m.name, colorOf(m.name)) }));
      const failures = models.reduce((sum, m) => sum + m.failure_per_s, 0);
      points.push({ key: "failures", y: failures, fixed: true, trace: line("failures", "#b3261e", { line: { dash: "dot" } }) });
      return points;
    }, { smooth: SMOOTH }),
    protocols: new LiveChart("chart-protocols", layout("requests/s", { barmode: "stack", bargap: 0.1 }), (snapshot) => {
      const totals = {};
      for (const m of byModel(snapshot).values()) {
        for (const [protocol, rate] of Object.entries(m.protocols || {})) {
          // calls made inside the server (ensemble steps, BLS, shadow copies, warm-up) were counted where they entered
          if (CLIENT_PROTOCOLS.has(protocol)) totals[protocol] = (totals[protocol] || 0) + rate;
        }
      }
      return Object.keys(totals)
        .sort()
        .map((protocol) => ({ key: protocol, y: totals[protocol], trace: { type: "bar", name: protocol.toUpperCase() } }));
    }),
    latency: new LiveChart("chart-latency", layout("ms"), (snapshot) =>
      entries(snapshot).flatMap((m) =>
        Object.keys(DASH).map((p) => ({
          key: `${m.name} ${p}`,
          group: m.name,
          y: m.latency_ms ? m.latency_ms[p] : null,
          trace: line(`${m.name} ${p}`, colorOf(m.name), { line: { dash: DASH[p] } }),
        })),
      ), { top: 3, fold: "max" },
    ),
    queueCompute: new LiveChart("chart-queue-compute", layout("ms per request"), (snapshot) =>
      entries(snapshot).flatMap((m) => [
        { key: `${m.name} queue`, group: m.name, y: m.queue_ms, trace: line(`${m.name} queue`, colorOf(m.name), { line: { dash: "dot" } }) },
        { key: `${m.name} compute`, group: m.name, y: m.compute_ms, trace: line(`${m.name} compute`, colorOf(m.name)) },
      ]), { top: 4, fold: "max" },
    ),
    batchSizes: new LiveChart("chart-batch-sizes", layout("executions/s", { barmode: "stack", bargap: 0.1 }), (snapshot) => {
      const sizes = {};
      for (const m of byModel(snapshot).values()) {
        for (const [size, count] of Object.entries(m.batch_sizes)) sizes[size] = (sizes[size] || 0) + count;
      }
      const seconds = snapshot.interval || interval;
      return Object.keys(sizes)
        .sort((a, b) => Number(a) - Number(b))
        .map((size) => ({ key: size, y: sizes[size] / seconds, trace: { type: "bar", name: `batch ${size}` } }));
    }, { smooth: SMOOTH }),
    devices: new LiveChart(
      "chart-devices",
      layout("utilization %", {
        yaxis: { title: { text: "utilization %" }, range: [0, 100] },
        yaxis2: { title: { text: "memory" }, overlaying: "y", side: "right", rangemode: "tozero" },
      }),
      deviceSeries,
    ),
    pending: new LiveChart("chart-pending", layout("requests", { yaxis: countAxis("requests") }), (snapshot) =>
      entries(snapshot).map((m) => ({ key: m.name, y: m.pending, trace: line(m.name, colorOf(m.name)) })),
      { empty: "No request has waited in a queue in this window." },
    ),
    tokens: new LiveChart("chart-tokens", layout("responses/s"), (snapshot) =>
      generators(snapshot).map((m) => ({ key: m.name, y: m.streams.responses_per_s, trace: line(m.name, colorOf(m.name)) })),
      { smooth: SMOOTH, empty: "No streamed responses in this window: a generator's playground streams some." },
    ),
    firstResponse: new LiveChart("chart-first-response", layout("ms"), (snapshot) =>
      generators(snapshot).flatMap((m) => [
        { key: `${m.name} first`, group: m.name, y: m.streams.first_response_ms, trace: line(`${m.name} to first`, colorOf(m.name)) },
        { key: `${m.name} between`, group: m.name, y: m.streams.between_responses_ms,
          trace: line(`${m.name} between`, colorOf(m.name), { line: { dash: "dot" } }) },
      ]), { top: 4, fold: "max", empty: "No streamed responses in this window." },
    ),
    streams: new LiveChart("chart-streams", layout("streams", { yaxis: countAxis("streams") }), (snapshot) =>
      generators(snapshot).map((m) => ({ key: m.name, y: m.streams.in_flight, trace: line(m.name, colorOf(m.name)) })),
      { empty: "No stream open in this window." },
    ),
    sequences: new LiveChart("chart-sequences", layout("sequences", { yaxis: countAxis("sequences") }), (snapshot) =>
      [...byModel(snapshot).values()]
        .filter((m) => m.sequences)
        .flatMap((m) => [
          { key: `${m.name} live`, group: m.name, y: m.sequences.live, trace: line(`${m.name} live`, colorOf(m.name)) },
          { key: `${m.name} slots`, group: m.name, y: m.sequences.slots_used,
            trace: line(`${m.name} slots in use`, colorOf(m.name), { line: { dash: "dot" } }) },
          { key: `${m.name} backlog`, group: m.name, y: m.sequences.backlog,
            trace: line(`${m.name} backlog`, colorOf(m.name), { line: { dash: "dash" } }) },
        ]), { top: 3, fold: "max", empty: "No sequence open in this window: a sequence model's Try it opens one." },
    ),
  };

  /* Decoupled models (generators): their charts show only when there is one. */
  function generators(snapshot) {
    const found = entries(snapshot).filter((m) => m.streams);
    const shown = found.length > 0;
    if (generationCards.length && generationCards[0].hidden === shown) {
      generationCards.forEach((card) => { card.hidden = !shown; });
      if (shown) window.dispatchEvent(new Event("resize")); // charts drawn while hidden take their width now
    }
    return found;
  }

  /* A cluster's view: each replica's GPUs (or CPU and process memory), named after it. */
  function clusterDeviceSeries(replicas) {
    return replicas.flatMap((r) => {
      const color = colorOf(`replica ${r.name}`);
      const devices = r.devices || { gpus: [], cpu: null };
      if (devices.gpus.length) {
        return devices.gpus.flatMap((gpu) => [
          { key: `${r.name} ${gpu.uuid} util`, y: gpu.utilization === null ? null : gpu.utilization * 100,
            trace: line(`${r.name} GPU ${gpu.index} utilization %`, color) },
          { key: `${r.name} ${gpu.uuid} mem`, y: gpu.memory_used_bytes === null ? null : gpu.memory_used_bytes / GIB,
            trace: line(`${r.name} GPU ${gpu.index} memory GiB`, color, { yaxis: "y2", line: { dash: "dot" } }) },
        ]);
      }
      if (!devices.cpu) return [];
      return [
        { key: `${r.name} cpu util`, y: devices.cpu.utilization * 100, trace: line(`${r.name} CPU utilization %`, color) },
        { key: `${r.name} process mem`, y: devices.cpu.process_memory_bytes / MIB,
          trace: line(`${r.name} process memory MiB`, color, { yaxis: "y2", line: { dash: "dot" } }) },
      ];
    });
  }

  function deviceSeries(snapshot) {
    const replicas = replicasOf(snapshot);
    if (replicas.length) return clusterDeviceSeries(replicas); // a cluster's view, however many replicas it has now
    const devices = snapshot.devices || { gpus: [], cpu: null };
    if (devices.gpus.length) {
      return devices.gpus.flatMap((gpu) => {
        const color = colorOf(gpu.uuid);
        const used = gpu.memory_used_bytes;
        return [
          { key: `${gpu.uuid} util`, y: gpu.utilization === null ? null : gpu.utilization * 100,
            trace: line(`GPU ${gpu.index} utilization %`, color) },
          { key: `${gpu.uuid} mem`, y: used === null ? null : used / GIB,
            trace: line(`GPU ${gpu.index} memory GiB`, color, { yaxis: "y2", line: { dash: "dot" } }) },
        ];
      });
    }
    if (!devices.cpu) return [];
    return [
      { key: "cpu util", y: devices.cpu.utilization * 100, trace: line("CPU utilization %", "#2f6fdb") },
      { key: "process mem", y: devices.cpu.process_memory_bytes / MIB,
        trace: line("process memory MiB", "#e07b24", { yaxis: "y2", line: { dash: "dot" } }) },
    ];
  }

  function showDeviceKind(snapshot) {
    const hasGpu = Boolean(snapshot.devices && snapshot.devices.gpus.length);
    if (hasGpu === gpuLayout) return false;
    gpuLayout = hasGpu;
    noGpuNote.hidden = hasGpu;
    deviceTitle.textContent = hasGpu ? "GPU utilization and memory" : "CPU utilization and process memory";
    return true;
  }

  function learnModels(snapshot) {
    for (const entry of snapshot.models || []) {
      if (knownModels.has(entry.name)) continue;
      knownModels.add(entry.name);
      modelOptions.append(new Option(entry.name, entry.name, false, entry.name === model));
    }
  }

  /* Ensembles go in the "Pipelines" group, whether they were listed with the page or learnt since. */
  function placeEnsembles(names) {
    for (const name of names || []) {
      const option = [...modelSelect.options].find((o) => o.value === name) || new Option(name, name);
      option.selected = name === model;
      if (option.parentElement !== pipelineOptions) pipelineOptions.append(option);
      knownModels.add(name);
    }
    pipelineOptions.hidden = pipelineOptions.children.length === 0;
  }

  /* The replica filter's choices: every replica heard from; one not in the newest snapshot is marked. */
  function learnReplicas(replicas, live) {
    for (const { name } of replicas) {
      if (![...replicaSelect.options].some((o) => o.value === name)) replicaSelect.append(new Option(name, name, false, name === replica));
    }
    if (live) {
      for (const option of replicaSelect.options) {
        if (!option.value) continue;
        const reporting = live.has(option.value);
        option.textContent = reporting ? option.value : `${option.value} (not reporting)`;
        option.dataset.state = reporting ? "live" : "gone";
      }
    }
    replicaFilter.hidden = replicaSelect.options.length <= 2 && !replica;
  }

  function showReplicas(snapshot) {
    const replicas = replicasOf(snapshot);
    replicaCount = replicas.length;
    replicasCard.hidden = replica !== null || replicaCount < 2;
    if (replicas.length) learnReplicas(replicas, new Set(replicas.map((r) => r.name)));
  }

  function maxPoints() {
    return Math.max(1, Math.round(windowSeconds / interval));
  }

  function onBacklog(message) {
    if ((message.model || null) !== model) return; // an answer to a selection since changed
    if ((message.replica || null) !== replica) return;
    interval = message.interval || interval;
    const snapshots = message.snapshots.slice(-maxPoints());
    answeredBy.textContent = message.process && message.replicas.length ? `via ${message.process}` : "";
    answeredBy.dataset.process = message.process || "";
    const choices = message.replicas || [];
    learnReplicas(choices, new Set(choices.filter((r) => r.state === "live").map((r) => r.name)));
    if (snapshots.length) {
      showDeviceKind(snapshots[snapshots.length - 1]);
      showReplicas(snapshots[snapshots.length - 1]);
    } else replicasCard.hidden = true;
    placeEnsembles(message.ensembles);
    snapshots.forEach(learnModels);
    for (const chart of Object.values(charts)) chart.rebuild(snapshots);
    panel.show(message.pipeline);
    panel.rebuild(snapshots);
    root.dataset.points = String(snapshots.length);
  }

  function onSnapshot(snapshot) {
    learnModels(snapshot);
    const before = replicaCount;
    showReplicas(snapshot);
    const clusterChanged = (before > 0) !== (replicaCount > 0); // the devices panel goes per replica, or back
    if (showDeviceKind(snapshot) || clusterChanged) charts.devices.rebuild([]); // its kind changed: start afresh
    for (const chart of Object.values(charts)) chart.extend(snapshot, maxPoints());
    if (snapshot.pipeline && snapshot.pipeline.model === model) {
      // an ensemble that loaded after the backlog: it joins the "Pipelines" group
      if (!pipelineOptions.querySelector(`option[value="${CSS.escape(model)}"]`)) placeEnsembles([model]);
      panel.extend(snapshot, maxPoints());
    }
    root.dataset.points = String(Math.min(Number(root.dataset.points || 0) + 1, maxPoints()));
  }

  function showState(state, detail) {
    stateLabel.dataset.state = state;
    if (state === "live") stateLabel.textContent = "live";
    else if (state === "connecting") stateLabel.textContent = "connecting…";
    else if (state === "reconnecting") stateLabel.textContent = `disconnected: retrying in ${detail.inSeconds} s`;
    else if (state === "refused") {
      stateLabel.textContent = "";
      const link = document.createElement("a");
      link.href = `/accounts/login/?next=${encodeURIComponent(window.location.pathname)}`;
      link.textContent = detail.code === 4403 ? "not allowed to view metrics" : "signed out: sign in again";
      stateLabel.append(link);
    }
  }

  const socket = new MetricsSocket({
    path: root.dataset.wsPath,
    params: () => ({ model, replica, window: windowSeconds }),
    onState: showState,
    onMessage: (message) => {
      if (message.type === "backlog") onBacklog(message);
      else if (message.type === "snapshot") onSnapshot(message.snapshot);
      else if (message.type === "error") console.warn("metrics stream:", message.error);
    },
  }).start();

  windowSelect.addEventListener("change", () => {
    windowSeconds = Number(windowSelect.value);
    socket.send({ window: windowSeconds }); // the answer is a backlog of the new window
  });

  /* The page's address keeps the selection, so a reload or a shared link shows the same. */
  function keepInAddress(name, value) {
    const url = new URL(window.location.href);
    if (value) url.searchParams.set(name, value);
    else url.searchParams.delete(name);
    window.history.replaceState(null, "", url);
  }

  modelSelect.addEventListener("change", () => {
    model = modelSelect.value || null;
    keepInAddress("model", model);
    socket.send({ model });
  });

  replicaSelect.addEventListener("change", () => {
    replica = replicaSelect.value || null;
    keepInAddress("replica", replica);
    socket.send({ replica }); // the backlog that answers is that replica's (or the whole cluster's)
  });

  splitToggle.addEventListener("change", () => {
    splitVersions = splitToggle.checked;
    keepInAddress("split", splitVersions ? "versions" : null);
    socket.send({ window: windowSeconds }); // the backlog that answers redraws every chart the new way
  });

  window.inferaMonitoring = { charts, panel, socket };
})();
