/* A model's config editor (templates/registry/_config_editor.html): the active version's config as config.pbtxt or
 * JSON, checked by the engine as you type, the changes from the current config, and saving.
 *
 * GET {api} reads the config; every edit (debounced) goes to POST {validate}, which answers with the engine's errors
 * (naming the field), the effective config in both forms and the differences. The form controls change the last
 * parsed config and send it through the same check, which writes the text back in the format shown. Saving is
 * POST {api} with action "new_version" or "apply"; buttons stay disabled while the edit is invalid or unchanged.
 */
(function () {
  "use strict";

  const CHECK_DELAY_MS = 300;

  function initEditor(root) {
    const { api, problem, el, notice } = window.InferaRegistry;
    const text = root.querySelector("#config-text");
    const check = root.querySelector("#config-check");
    const errors = root.querySelector("#config-errors");
    const diff = root.querySelector("#config-diff");
    const knobs = root.querySelector("#config-knobs");
    const result = root.querySelector("#config-result");
    const saveNew = root.querySelector("#config-save-new");
    const apply = root.querySelector("#config-apply");
    const canManage = root.dataset.canManage === "true";
    let current = null; // GET answer: {model, version, config, pbtxt}
    let last = null; // the last check's answer
    let parsed = null; // the last config that parsed (JSON form), which the form controls change
    let sequence = 0; // answers to older checks are dropped
    let timer = null;

    function format() {
      return root.querySelector('input[name="config-format"]:checked').value;
    }

    function written(config, pbtxt) {
      return format() === "json" ? JSON.stringify(config, null, 2) : pbtxt;
    }

    async function load() {
      root.dataset.state = "loading";
      const answer = await api("GET", root.dataset.api);
      if (!answer.ok) {
        root.dataset.state = "unavailable";
        check.textContent = problem(answer);
        text.value = "";
        knobs.disabled = true;
        return;
      }
      current = answer.data;
      parsed = current.config;
      root.querySelector("#config-editor-version").textContent = `(version ${current.version})`;
      text.value = written(current.config, current.pbtxt);
      showKnobs(current.config);
      knobs.disabled = !canManage;
      root.dataset.version = String(current.version);
      root.dataset.state = "ready";
      await validate(text.value, format());
    }

    /* Check a config; `fromKnobs` when the form controls wrote it: then the answer never writes the controls back,
     * since one the user is changing meanwhile would lose its new value (the editor race). */
    async function validate(body, form, fromKnobs = false) {
      const mine = ++sequence;
      root.dataset.checking = "true";
      const answer = await api("POST", root.dataset.validate, { format: form, text: body });
      if (mine !== sequence) return null;
      root.dataset.checking = "false";
      if (!answer.ok) {
        show({ valid: false, errors: [problem(answer)], changes: [], diff: [], config: null, pbtxt: "" });
        return null;
      }
      show(answer.data, fromKnobs);
      return answer.data;
    }

    function show(answer, fromKnobs = false) {
      last = answer;
      if (answer.config) parsed = answer.config;
      check.dataset.valid = String(answer.valid);
      errors.replaceChildren(...answer.errors.map((message) => el("li", {}, message)));
      const count = answer.changes.length;
      if (!answer.valid) check.textContent = "The engine refuses this config:";
      else if (!count) check.textContent = "Valid: the config this version serves with, unchanged.";
      else check.textContent = `Valid: ${count} field${count === 1 ? "" : "s"} changed.`;
      root.querySelector("#config-change-count").textContent = answer.valid ? `(${count})` : "";
      diff.replaceChildren(
        ...answer.diff.map((line) => el("span", { className: diffClass(line) }, line + "\n")),
      );
      if (answer.valid && answer.config && !fromKnobs) showKnobs(answer.config);
      const ready = canManage && answer.valid && count > 0;
      if (saveNew) saveNew.disabled = !ready;
      if (apply) apply.disabled = !ready;
    }

    function diffClass(line) {
      if (line.startsWith("+++") || line.startsWith("---")) return "diff-file";
      if (line.startsWith("+")) return "diff-add";
      if (line.startsWith("-")) return "diff-remove";
      if (line.startsWith("@@")) return "diff-hunk";
      return "";
    }

    function scheduleCheck() {
      clearTimeout(timer);
      sequence += 1; // a check in flight answers for a text that is gone
      check.dataset.valid = "";
      check.textContent = "Checking…";
      if (saveNew) saveNew.disabled = true;
      if (apply) apply.disabled = true;
      timer = setTimeout(() => validate(text.value, format()), CHECK_DELAY_MS);
    }

    // ---- the form controls: read from a config, written into a copy of the last parsed one

    function knob(name) {
      return knobs.querySelector(`[data-knob="${name}"]`);
    }

    function showKnobs(config) {
      const batching = config.dynamic_batching || null;
      const group = (config.instance_group || [])[0] || {};
      const policy = (batching && batching.default_queue_policy) || {};
      knob("max_batch_size").value = config.max_batch_size || 0;
      knob("dynamic").checked = batching !== null;
      knob("delay").value = batching ? batching.max_queue_delay_microseconds || 0 : 0;
      knob("preferred").value = batching ? (batching.preferred_batch_size || []).join(", ") : "";
      knob("instance_count").value = group.count || 1;
      knob("instance_kind").value = group.kind || "KIND_AUTO";
      knob("priority_levels").value = batching ? batching.priority_levels || 0 : 0;
      knob("default_priority_level").value = batching ? batching.default_priority_level || 0 : 0;
      knob("max_queue_size").value = policy.max_queue_size || 0;
      knob("default_timeout_microseconds").value = policy.default_timeout_microseconds || 0;
      knob("timeout_action").value = policy.timeout_action || "REJECT";
      knob("allow_timeout_override").checked = Boolean(policy.allow_timeout_override);
      batchingKnobs(batching !== null);
    }

    function batchingKnobs(enabled) {
      for (const name of ["delay", "preferred", "priority_levels", "default_priority_level", "max_queue_size",
        "default_timeout_microseconds", "timeout_action", "allow_timeout_override"]) {
        knob(name).disabled = !enabled;
      }
    }

    function number(name) {
      const value = Number(knob(name).value);
      return Number.isFinite(value) ? Math.trunc(value) : 0;
    }

    function fromKnobs(base) {
      const config = JSON.parse(JSON.stringify(base));
      config.max_batch_size = number("max_batch_size");
      if (!knob("dynamic").checked) {
        delete config.dynamic_batching;
      } else {
        const batching = config.dynamic_batching || {};
        batching.max_queue_delay_microseconds = number("delay");
        batching.preferred_batch_size = knob("preferred").value.split(/[\s,]+/).filter(Boolean).map(Number);
        batching.priority_levels = number("priority_levels");
        batching.default_priority_level = number("default_priority_level");
        batching.default_queue_policy = {
          ...(batching.default_queue_policy || {}),
          max_queue_size: number("max_queue_size"),
          default_timeout_microseconds: number("default_timeout_microseconds"),
          timeout_action: knob("timeout_action").value,
          allow_timeout_override: knob("allow_timeout_override").checked,
        };
        config.dynamic_batching = batching;
      }
      const count = number("instance_count");
      const kind = knob("instance_kind").value;
      const groups = config.instance_group || [];
      if (groups.length || count !== 1 || kind !== "KIND_AUTO") {
        // a config without instance groups gets one only when it asks for something other than the default
        config.instance_group = [{ ...(groups[0] || {}), count, kind }, ...groups.slice(1)];
      }
      return config;
    }

    async function knobChanged() {
      if (!parsed) return;
      clearTimeout(timer);
      const config = fromKnobs(parsed);
      batchingKnobs(knob("dynamic").checked);
      const answer = await validate(JSON.stringify(config), "json", true);
      if (!answer) return;
      text.value = format() === "json" ? JSON.stringify(answer.config || config, null, 2) : answer.pbtxt;
    }

    function formatChanged() {
      // the text is rewritten in the other form from the last check: pbtxt once it parses, JSON once it is valid
      const target = format();
      if (target === "pbtxt" && last && last.pbtxt) {
        text.value = last.pbtxt;
      } else if (target === "json" && last && last.valid) {
        text.value = JSON.stringify(last.config, null, 2);
      } else {
        root.querySelector(`#config-format-${target === "json" ? "pbtxt" : "json"}`).checked = true;
        notice(result, false, "Fix the errors first: the text can be rewritten in the other form once it is valid.");
        return;
      }
      result.hidden = true;
      scheduleCheck();
    }

    async function save(action) {
      if (!last || !last.valid) return;
      if (action === "apply" && !window.confirm(`Reload version ${current.version} with this config?`)) return;
      saveNew.disabled = apply.disabled = true;
      const notes = root.querySelector("#config-notes").value;
      const answer = await api("POST", root.dataset.api, { format: format(), text: text.value, action, notes });
      if (!answer.ok) {
        notice(result, false, problem(answer));
        show(last);
        return;
      }
      const version = answer.data.number;
      result.dataset.version = String(version);
      notice(
        result,
        true,
        action === "apply"
          ? `Version ${version} reloads with the edited config (the old one serves until it is READY).`
          : `Version ${version} created with the edited config; it takes traffic once it is READY.`,
      );
      await load();
    }

    text.addEventListener("input", scheduleCheck);
    for (const radio of root.querySelectorAll('input[name="config-format"]')) radio.addEventListener("change", formatChanged);
    knobs.addEventListener("change", knobChanged);
    if (saveNew) saveNew.addEventListener("click", () => save("new_version"));
    if (apply) apply.addEventListener("click", () => save("apply"));
    const reset = root.querySelector("#config-reset");
    if (reset) reset.addEventListener("click", () => load());
    load();
  }

  function start() {
    const root = document.getElementById("config-editor");
    if (root && window.InferaRegistry) initEditor(root);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
