/* Registry pages: live model and version states from the REST API, upload with progress, actions; "try it" is try_it.js.
 *
 * Every page polls its API URL every two seconds, so states change on screen without a reload (the models list
 * updates the rows its filters matched; a model registered since shows on the next load). Changes go to
 * the same REST API as scripts use (session cookie + CSRF token from the page's meta tag).
 */
(function () {
  "use strict";

  const POLL_MS = 2000;

  function csrfToken() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }

  /* fetch with JSON in and out; never throws for HTTP errors: {ok, status, data}. */
  async function api(method, url, body, headers = {}, timeoutMs = 60000) {
    const options = {
      method,
      credentials: "same-origin",
      headers: { Accept: "application/json", ...headers },
      signal: AbortSignal.timeout(timeoutMs),
    };
    if (method !== "GET") options.headers["X-CSRFToken"] = csrfToken();
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = typeof body === "string" ? body : JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, options);
    } catch (error) {
      const why = error.name === "TimeoutError" ? `no answer in ${timeoutMs / 1000} s` : error.message;
      return { ok: false, status: 0, data: { detail: `the request failed: ${why}` } };
    }
    return { ok: response.ok, status: response.status, data: parseBody(await response.text()) };
  }

  function parseBody(text) {
    if (!text) return null;
    try {
      return JSON.parse(text);
    } catch (error) {
      return { detail: text.slice(0, 500) };
    }
  }

  /* The message of a DRF error body: {"detail": ...} or {"field": ["..."]}. */
  function problem(result) {
    const data = result.data;
    if (!data) return `HTTP ${result.status}`;
    if (typeof data.detail === "string") return data.detail;
    if (typeof data.error === "string") return data.error;
    return Object.entries(data)
      .map(([field, messages]) => `${field}: ${[].concat(messages).join(" ")}`)
      .join("\n");
  }

  /* A DOM element with text children only (data never becomes markup). */
  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props)) {
      if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "className") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function setState(node, state) {
    node.textContent = state || "–";
    node.className = `state${state ? " state-" + state.toLowerCase() : ""}`;
  }

  function notice(node, ok, text) {
    node.hidden = false;
    node.className = `notice ${ok ? "ok" : "bad"}`;
    node.textContent = text;
  }

  function humanSize(bytes) {
    const units = ["B", "KB", "MB", "GB"];
    let value = bytes;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return `${value < 10 && unit ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
  }

  function shown(value) {
    return value === null || value === undefined ? "–" : String(value);
  }

  /* Run `task` now and every `ms` after it finishes (never two at once). */
  function every(ms, task) {
    let stopped = false;
    async function tick() {
      if (stopped) return;
      try {
        await task();
      } finally {
        if (!stopped) setTimeout(tick, ms);
      }
    }
    tick();
    return () => {
      stopped = true;
    };
  }

  // ---- the models list

  function initModelList(root) {
    const rows = root.querySelector("#model-rows");
    const status = root.querySelector("#list-status");

    async function refresh() {
      const result = await api("GET", root.dataset.api);
      if (!result.ok) {
        status.textContent = `Cannot refresh: ${problem(result)}`;
        return;
      }
      status.textContent = "";
      for (const model of result.data) {
        // the page lists what its filters matched, in its sort order: only those rows change here
        const row = rows.querySelector(`tr[data-model="${CSS.escape(model.name)}"]`);
        if (!row) continue;
        setState(row.querySelector('[data-field="state"]'), model.state);
        row.querySelector('[data-field="replica_summary"]').textContent = model.replica_summary;
        for (const field of ["active_version", "serving_version"]) {
          row.querySelector(`[data-field="${field}"]`).textContent = model[field] === null ? "–" : `v${model[field]}`;
        }
        row.querySelector('[data-field="version_count"]').textContent = shown(model.version_count);
      }
    }

    const form = root.querySelector("#register-form");
    if (form) {
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const name = form.querySelector("#register-name").value.trim();
        const description = form.querySelector("#register-description").value;
        const result = await api("POST", root.dataset.api, { name, description });
        if (result.ok) window.location.assign(`/models/${encodeURIComponent(name)}/`);
        else notice(form.querySelector("#register-result"), false, problem(result));
      });
    }
    every(POLL_MS, refresh);
  }

  // ---- one model's page

  function initModelDetail(root) {
    const name = root.dataset.model;
    const base = root.dataset.api;
    const canManage = root.dataset.canManage === "true";
    const rows = root.querySelector("#version-rows");
    const actionResult = root.querySelector("#action-result");
    let shownConfigFor = null;
    let stop = null;
    let versions = [];
    const listing = versionListing(root, () => showVersions());

    function showVersions() {
      const shownVersions = listing.apply(versions);
      rows.replaceChildren(...shownVersions.map(versionRow));
      if (!shownVersions.length) {
        const why = versions.length ? "No version matches these filters." : "No versions yet.";
        rows.append(el("tr", { className: "empty" }, el("td", { colspan: 9 }, why)));
      }
    }

    async function refresh() {
      const result = await api("GET", base);
      if (result.status === 404) {
        notice(actionResult, false, `Model '${name}' is no longer registered.`);
        if (stop) stop();
        return;
      }
      if (!result.ok) {
        notice(actionResult, false, `Cannot refresh: ${problem(result)}`);
        return;
      }
      const model = result.data;
      setState(root.querySelector("#model-state"), model.state);
      root.querySelector("#active-version").textContent = shown(model.active_version);
      root.querySelector("#serving-version").textContent = shown(model.serving_version);
      showReplicas(model.cluster);
      versions = model.versions;
      showVersions();
      upload.follow(versions);
      tryIt.versions(model.versions.filter((v) => v.is_loaded).map((v) => v.number));
      if (model.active_version !== shownConfigFor) showConfig(model.active_version);
      if (model.serving_version !== null) tryIt.ready();
    }

    function showReplicas(cluster) {
      const node = root.querySelector("#replicas");
      const known = cluster.live.length + cluster.gone.length;
      node.hidden = known < 2;
      const gone = cluster.gone.map((r) => `${r.name} (last seen ${new Date(r.last_seen).toLocaleString()})`);
      node.textContent = `Replicas: ${cluster.live.length} serving: ${cluster.live.join(", ") || "none"}` + (gone.length ? ` · gone: ${gone.join(", ")}` : "");
    }

    async function showConfig(number) {
      shownConfigFor = number;
      const target = root.querySelector("#effective-config");
      root.querySelector("#config-version").textContent = number === null ? "" : `(version ${number})`;
      if (number === null) {
        target.textContent = "–";
        return;
      }
      const result = await api("GET", `${base}versions/${number}/`);
      target.textContent = result.ok ? JSON.stringify(result.data.config, null, 2) : problem(result);
    }

    function versionRow(version) {
      const stateCell = el("td", {}, el("span", { className: `state state-${version.state.toLowerCase()}` }, version.state));
      if (version.error) stateCell.append(errorText(version.error));
      if (version.replica_summary) {
        // each replica's own state in the tooltip; gone replicas are listed but not counted
        const each = version.replicas.map((r) => `${r.replica}: ${r.state}${r.live ? "" : " (gone)"}${r.error ? " – " + r.error : ""}`);
        stateCell.append(el("div", { className: "muted replica-summary", title: each.join("\n") }, version.replica_summary));
      }
      const loaded = version.is_serving ? "serving" : version.is_loaded ? "loaded" : "";
      const row = el(
        "tr",
        { dataset: { version: version.number, state: version.state }, className: version.is_active ? "active-row" : "" },
        el("td", {}, version.number),
        stateCell,
        el("td", {}, version.is_active ? "★ active" : ""),
        el("td", {}, loaded),
        el("td", {}, `${version.uploaded_by || "system"}, ${new Date(version.uploaded_at).toLocaleString()}`),
        el("td", {}, humanSize(version.size)),
        el("td", { title: version.sha256 }, el("code", {}, version.sha256.slice(0, 12))),
        el("td", {}, version.notes),
        el("td", { className: "actions" }, ...(canManage ? actionButtons(version) : [])),
      );
      return row;
    }

    /* A long error folds under its first line, so it never squeezes the table. */
    function errorText(error) {
      const first = error.split("\n")[0];
      if (error.length <= 80) return el("div", { className: "error-text" }, error);
      return el("details", { className: "error-text" }, el("summary", {}, `${first.slice(0, 70)}…`), el("div", {}, error));
    }

    function actionButtons(version) {
      const buttons = [];
      const n = version.number;
      if (version.state === "READY" && !version.is_active) {
        buttons.push(actionButton("Activate", "activate", n, `Activate version ${n} of '${name}'? It takes every request that names no version.`));
      }
      // an upload that failed its checks kept no files: a retry would fail the same way, so none is offered
      if (version.loadable && (version.state === "FAILED" || version.state === "UNLOADED" || !version.should_load)) {
        const label = version.state === "FAILED" ? "Retry load" : "Load";
        buttons.push(actionButton(label, "load", n, `Load version ${n} of '${name}'?`));
      }
      if (version.should_load && !version.is_active && version.state !== "FAILED") {
        buttons.push(actionButton("Unload", "unload", n, `Unload version ${n} of '${name}'? Requests that name it will fail.`, "secondary"));
      }
      if (!version.is_active) {
        buttons.push(actionButton("Delete", "delete", n, `Delete version ${n} of '${name}' and its files? This cannot be undone.`, "danger"));
      }
      return buttons;
    }

    function actionButton(label, action, number, question, kind = "") {
      return el(
        "button",
        {
          type: "button",
          className: kind,
          dataset: { action, version: number },
          onclick: async (event) => {
            if (!window.confirm(question)) return;
            event.target.disabled = true;
            const url = action === "delete" ? `${base}versions/${number}/` : `${base}versions/${number}/${action}`;
            const result = await api(action === "delete" ? "DELETE" : "POST", url);
            const done = { activate: "activated", load: "asked to load", unload: "asked to unload", delete: "deleted" }[action];
            notice(actionResult, result.ok, result.ok ? `Version ${number} ${done}.` : problem(result));
            await refresh();
          },
        },
        label,
      );
    }

    const tryIt = window.InferaTryIt.init(root, name);
    const upload = initUpload(root, base, () => refresh());
    initDelete(root, base, name, () => stop && stop());
    stop = every(POLL_MS, refresh);
  }

  // ---- a model's versions: sorted by a column header's button, filtered by state and a word; kept in the URL

  const VERSION_SORT_KEYS = {
    number: (v) => v.number,
    state: (v) => v.state,
    active: (v) => (v.is_active ? 0 : 1),
    loaded: (v) => (v.is_serving ? 0 : v.is_loaded ? 1 : 2),
    uploaded: (v) => v.uploaded_at,
    size: (v) => v.size,
    notes: (v) => (v.notes || "").toLowerCase(),
  };

  function versionListing(root, onChange) {
    const table = root.querySelector("#versions-table");
    const stateFilter = root.querySelector("#version-filter-state");
    const textFilter = root.querySelector("#version-filter-text");
    const params = new URL(window.location.href).searchParams;
    let sort = params.get("versions_sort") || "number";
    if (!(sort.replace(/^-/, "") in VERSION_SORT_KEYS)) sort = "number";
    stateFilter.value = params.get("versions_state") || "";
    textFilter.value = params.get("versions_q") || "";

    const headers = [...table.querySelectorAll("th[data-sort]")];
    for (const header of headers) {
      const key = header.dataset.sort;
      header.replaceChildren(
        el(
          "button",
          {
            type: "button",
            className: "sort",
            onclick: () => {
              sort = sort === key ? `-${key}` : key;
              changed();
            },
          },
          header.textContent,
          el("span", { className: "arrow", "aria-hidden": "true" }),
        ),
      );
    }

    function mark() {
      for (const header of headers) {
        const key = header.dataset.sort;
        const direction = sort === key ? "ascending" : sort === `-${key}` ? "descending" : null;
        if (direction) header.setAttribute("aria-sort", direction);
        else header.removeAttribute("aria-sort");
        header.querySelector(".arrow").textContent = direction === "ascending" ? " ▲" : direction === "descending" ? " ▼" : " ↕";
      }
    }

    function changed() {
      const url = new URL(window.location.href);
      const wanted = { versions_sort: sort === "number" ? "" : sort, versions_state: stateFilter.value, versions_q: textFilter.value };
      for (const [name, value] of Object.entries(wanted)) {
        if (value) url.searchParams.set(name, value);
        else url.searchParams.delete(name);
      }
      window.history.replaceState(null, "", url);
      mark();
      onChange();
    }

    stateFilter.addEventListener("change", changed);
    textFilter.addEventListener("input", changed);
    mark();

    return {
      apply(versions) {
        const word = textFilter.value.trim().toLowerCase();
        const matching = versions.filter(
          (v) =>
            (!stateFilter.value || v.state === stateFilter.value) &&
            (!word || [v.notes, v.uploaded_by, v.sha256].some((text) => (text || "").toLowerCase().includes(word))),
        );
        const key = VERSION_SORT_KEYS[sort.replace(/^-/, "")];
        const direction = sort.startsWith("-") ? -1 : 1;
        return matching.sort((a, b) => (key(a) < key(b) ? -direction : key(a) > key(b) ? direction : a.number - b.number));
      },
    };
  }

  // ---- deleting the model: refused (409, with the reason) while an ensemble calls it

  function initDelete(root, base, name, onDeleted) {
    const button = root.querySelector("#delete-model");
    if (!button) return;
    const result = root.querySelector("#delete-result");
    button.addEventListener("click", async () => {
      if (!window.confirm(`Delete '${name}', every version and its files? This cannot be undone.`)) return;
      button.disabled = true;
      const answer = await api("DELETE", base);
      button.disabled = false;
      if (answer.ok) {
        onDeleted();
        window.location.assign("/models/");
        return;
      }
      notice(result, false, problem(answer));
    });
  }

  // ---- upload: drag and drop or choose, then an XMLHttpRequest for its progress events

  function initUpload(root, base, onDone) {
    const form = root.querySelector("#upload-form");
    if (!form) return { follow() {} };
    const zone = form.querySelector("#dropzone");
    const input = form.querySelector("#upload-file");
    const chosenLabel = form.querySelector("#chosen-file");
    const progress = form.querySelector("#upload-progress");
    const result = form.querySelector("#upload-result");
    const button = form.querySelector("#upload-button");
    const maxBytes = Number(root.dataset.maxUpload);
    let chosen = null;
    let loading = null; // the uploaded version whose load the notice reports, until it ends

    function choose(file) {
      chosen = file || null;
      chosenLabel.textContent = chosen ? `${chosen.name} (${humanSize(chosen.size)})` : "No file chosen.";
    }
    input.addEventListener("change", () => choose(input.files[0]));
    zone.addEventListener("dragover", (event) => {
      event.preventDefault();
      zone.classList.add("over");
    });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", (event) => {
      event.preventDefault();
      zone.classList.remove("over");
      if (event.dataTransfer.files.length) choose(event.dataTransfer.files[0]);
    });

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const config = form.querySelector("#upload-config").files[0];
      if (!chosen && !config) {
        notice(result, false, "Choose or drop a model file first (an ensemble's version needs only a config).");
        return;
      }
      if (chosen && chosen.size > maxBytes) {
        notice(result, false, `${chosen.name} is ${humanSize(chosen.size)}, over the upload limit of ${humanSize(maxBytes)}.`);
        return;
      }
      const data = new FormData();
      if (chosen) data.append("file", chosen, chosen.name);
      if (config) data.append("config", config, config.name);
      data.append("notes", form.querySelector("#upload-notes").value);
      data.append("activate", form.querySelector("#upload-activate").checked ? "true" : "false");

      const request = new XMLHttpRequest();
      request.open("POST", `${base}versions/`);
      request.setRequestHeader("X-CSRFToken", csrfToken());
      request.setRequestHeader("Accept", "application/json");
      request.upload.addEventListener("progress", (progressEvent) => {
        if (progressEvent.lengthComputable) progress.value = (100 * progressEvent.loaded) / progressEvent.total;
      });
      request.addEventListener("load", () => {
        button.disabled = false;
        progress.value = 100;
        const answer = { ok: request.status < 300, status: request.status, data: parseBody(request.responseText) };
        if (answer.ok) {
          const also = (answer.data.companions || []).map((v) => `${v.model}/${v.number}`);
          const withIt = also.length ? ` With it: ${also.join(", ")}.` : "";
          notice(result, true, `Version ${answer.data.number} uploaded and checked; it is loading now.${withIt}`);
          loading = answer.data.number;
          form.reset();
          choose(null);
        } else {
          notice(result, false, problem(answer));
        }
        onDone();
      });
      request.addEventListener("error", () => {
        button.disabled = false;
        notice(result, false, "The upload did not reach the server.");
      });
      button.disabled = true;
      progress.hidden = false;
      progress.value = 0;
      result.hidden = true;
      request.send(data);
    });

    return {
      /* The notice follows the uploaded version: READY or FAILED replaces "it is loading now". */
      follow(versions) {
        const version = versions.find((v) => v.number === loading);
        if (!version || !["READY", "FAILED"].includes(version.state)) return;
        loading = null;
        if (version.state === "READY") notice(result, true, `Version ${version.number} uploaded and READY${version.is_active ? " (active)" : ""}.`);
        else notice(result, false, `Version ${version.number} uploaded but failed to load: ${version.error}`);
      },
    };
  }

  // the helpers other registry scripts (traffic.js) build on
  window.InferaRegistry = { api, problem, el, notice, shown, every };

  function start() {
    const list = document.querySelector('[data-page="model-list"]');
    if (list) initModelList(list);
    const detail = document.querySelector('[data-page="model-detail"]');
    if (detail) initModelDetail(detail);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
