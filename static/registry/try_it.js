/* A model page's Try it: a v2 request built from the model's metadata and its config's plan
 * (console/registry/try_it.py), sent as the model expects it, with the same request as curl and tritonclient code.
 *
 * - numbers default to ones (zeros say nothing), BYTES to text, and an input the plan has a sample for (an 8x8
 *   digit) to that sample;
 * - a sequence model gets a correlation id and START/END controls, written into the request's parameters;
 * - an image input (BYTES, named like an image) is a PNG from the picker, the bundled sample digit by default,
 *   sent through the binary tensor extension (a PNG's bytes do not survive JSON text).
 */
(function () {
  "use strict";

  const NUMPY = {
    BOOL: "bool", UINT8: "np.uint8", UINT16: "np.uint16", UINT32: "np.uint32", UINT64: "np.uint64", INT8: "np.int8",
    INT16: "np.int16", INT32: "np.int32", INT64: "np.int64", FP16: "np.float16", FP32: "np.float32", FP64: "np.float64",
    BYTES: "object",
  };
  const IMAGE_PLACEHOLDER = "(the PNG chosen below)";

  function init(root, name) {
    const { api, problem, el } = window.InferaRegistry;
    const form = root.querySelector("#try-form");
    if (!form) return { versions() {}, ready() {} }; // a text generator's page has the playground instead
    const plan = JSON.parse(document.getElementById("try-plan").textContent);
    const body = form.querySelector("#try-body");
    const versionSelect = form.querySelector("#try-version");
    const token = form.querySelector("#try-token");
    const status = root.querySelector("#try-status");
    const answer = root.querySelector("#try-answer");
    const sequenceId = form.querySelector("#try-sequence-id");
    const sequenceStart = form.querySelector("#try-sequence-start");
    const sequenceEnd = form.querySelector("#try-sequence-end");
    const images = {}; // input name -> Uint8Array of the PNG to send
    let built = false;

    if (sequenceId) sequenceId.value = String(1 + Math.floor(Math.random() * 1_000_000));

    function modelUrl() {
      const version = versionSelect.value;
      return `/v2/models/${encodeURIComponent(name)}${version ? `/versions/${version}` : ""}`;
    }

    function headers() {
      return token.value ? { Authorization: `Bearer ${token.value}` } : {};
    }

    function defaultData(tensor, count) {
      if (plan.examples[tensor.name] && plan.examples[tensor.name].length === count) return plan.examples[tensor.name];
      if (plan.image_inputs.includes(tensor.name)) return new Array(count).fill(IMAGE_PLACEHOLDER);
      const one = tensor.datatype === "BYTES" ? "1" : tensor.datatype === "BOOL" ? true : 1;
      return new Array(count).fill(one);
    }

    /* The request in the text area with the sequence controls written into its parameters (null if not JSON). */
    function request() {
      let parsed;
      try {
        parsed = JSON.parse(body.value);
      } catch (error) {
        return null;
      }
      if (sequenceId && parsed && typeof parsed === "object") {
        parsed.parameters = {
          ...(parsed.parameters || {}),
          sequence_id: Number(sequenceId.value) || 0,
          sequence_start: sequenceStart.checked,
          sequence_end: sequenceEnd.checked,
        };
      }
      return parsed;
    }

    async function build() {
      const result = await api("GET", modelUrl(), undefined, headers());
      if (!result.ok) {
        status.textContent = `Metadata: ${problem(result)}`;
        return false;
      }
      const inputs = result.data.inputs.map((tensor) => {
        const shape = tensor.shape.map((d) => (d < 0 ? 1 : d));
        const count = shape.reduce((a, b) => a * b, 1);
        return { name: tensor.name, shape, datatype: tensor.datatype, data: defaultData(tensor, count) };
      });
      body.value = JSON.stringify({ inputs }, null, 1);
      written();
      status.textContent = `Built from the metadata of ${result.data.name} (versions ${result.data.versions.join(", ")}).`;
      return true;
    }

    /* The body to send: JSON, or JSON and binary tensors (the binary tensor extension) when an image goes. */
    function encoded(parsed) {
      const binary = [];
      for (const input of parsed.inputs || []) {
        const png = images[input.name];
        if (!png || !plan.image_inputs.includes(input.name)) continue;
        const count = (input.shape || [1]).reduce((a, b) => a * b, 1);
        const one = new Uint8Array(4 + png.length);
        new DataView(one.buffer).setUint32(0, png.length, true);
        one.set(png, 4);
        const all = new Uint8Array(one.length * count);
        for (let i = 0; i < count; i += 1) all.set(one, i * one.length);
        delete input.data;
        input.parameters = { ...(input.parameters || {}), binary_data_size: all.length };
        binary.push(all);
      }
      const header = JSON.stringify(parsed);
      if (!binary.length) return { body: header, headers: { "Content-Type": "application/json" } };
      const headerBytes = new TextEncoder().encode(header);
      return {
        body: new Blob([headerBytes, ...binary]),
        headers: { "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": String(headerBytes.length) },
      };
    }

    async function send() {
      delete status.dataset.modelVersion; // set again by this answer, never left from the last one
      delete status.dataset.httpStatus;
      const parsed = request();
      if (!parsed) {
        status.textContent = "The request is not valid JSON.";
        return;
      }
      const { body: payload, headers: kind } = encoded(parsed);
      const started = performance.now();
      let code = 0;
      let data = null;
      try {
        const response = await fetch(`${modelUrl()}/infer`, {
          method: "POST",
          credentials: "same-origin",
          headers: { Accept: "application/json", ...kind, ...headers() },
          body: payload,
          signal: AbortSignal.timeout(60000),
        });
        code = response.status;
        const text = await response.text();
        try {
          data = text ? JSON.parse(text) : null;
        } catch (error) {
          data = { detail: text.slice(0, 500) };
        }
      } catch (error) {
        data = { error: `the request failed: ${error.message}` };
      }
      const millis = (performance.now() - started).toFixed(1);
      answer.hidden = false;
      answer.textContent = JSON.stringify(data, null, 2);
      const version = data && data.model_version ? ` · model_version ${data.model_version}` : "";
      status.textContent = `HTTP ${code}${version} · ${millis} ms`;
      status.dataset.httpStatus = String(code);
      status.dataset.modelVersion = (data && data.model_version) || "";
    }

    // ---- the same request from code

    function pythonArray(input) {
      if (plan.image_inputs.includes(input.name)) {
        return `np.array([open("digit.png", "rb").read()] * ${input.data ? input.data.length : 1}, dtype=object)`;
      }
      const values = JSON.stringify(input.data || []).replace(/true/g, "True").replace(/false/g, "False");
      return `np.array(${values}, dtype=${NUMPY[input.datatype] || "np.float32"})`;
    }

    function snippets() {
      const parsed = request();
      const curl = root.querySelector("#try-curl");
      const python = root.querySelector("#try-python");
      if (!curl || !python || !parsed) return;
      const origin = window.location.origin;
      const auth = token.value ? " \\\n  -H 'Authorization: Bearer $INFERA_TOKEN'" : "";
      const hasImage = (parsed.inputs || []).some((input) => plan.image_inputs.includes(input.name));
      curl.textContent = hasImage
        ? "# a PNG's bytes go as a binary tensor, which curl cannot build by itself: use tritonclient (beside)"
        : `curl -s ${origin}${modelUrl()}/infer${auth} \\\n  -H 'Content-Type: application/json' \\\n  -d '${JSON.stringify(parsed)}'`;
      const lines = ["import numpy as np", "import tritonclient.http as httpclient", "", `client = httpclient.InferenceServerClient("${window.location.host}")`, "inputs = []"];
      for (const input of parsed.inputs || []) {
        lines.push(`tensor = httpclient.InferInput("${input.name}", ${JSON.stringify(input.shape)}, "${input.datatype}")`);
        lines.push(`tensor.set_data_from_numpy(${pythonArray(input)}.reshape(${JSON.stringify(input.shape)}))`);
        lines.push("inputs.append(tensor)");
      }
      const options = [`"${name}"`, "inputs"];
      if (versionSelect.value) options.push(`model_version="${versionSelect.value}"`);
      const sequence = parsed.parameters || {};
      if (sequence.sequence_id) {
        options.push(`sequence_id=${sequence.sequence_id}`, `sequence_start=${sequence.sequence_start ? "True" : "False"}`, `sequence_end=${sequence.sequence_end ? "True" : "False"}`);
      }
      if (token.value) options.push('headers={"Authorization": "Bearer " + token}');
      lines.push(`result = client.infer(${options.join(", ")})`, "print(result.get_response())");
      python.textContent = lines.join("\n");
    }

    function written() {
      snippets();
    }

    // ---- the image picker: the sample digit until another PNG is chosen

    async function loadSample() {
      const picker = root.querySelector("#try-image");
      if (!picker || !plan.image_inputs.length) return;
      const response = await fetch(picker.dataset.sample, { credentials: "same-origin" });
      const bytes = new Uint8Array(await response.arrayBuffer());
      for (const input of plan.image_inputs) images[input] = bytes;
    }

    const picker = root.querySelector("#try-image");
    if (picker) {
      picker.addEventListener("change", async () => {
        const file = picker.files[0];
        const preview = root.querySelector("#try-image-preview");
        if (!file) return;
        const bytes = new Uint8Array(await file.arrayBuffer());
        for (const input of plan.image_inputs) images[input] = bytes;
        preview.src = URL.createObjectURL(file);
        preview.alt = `The chosen image, ${file.name}`;
      });
    }

    form.querySelector("#try-build").addEventListener("click", build);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!body.value.trim() && !(await build())) return;
      await send();
    });
    for (const node of [body, token, versionSelect, sequenceId, sequenceStart, sequenceEnd]) {
      if (node) node.addEventListener(node.type === "checkbox" || node.tagName === "SELECT" ? "change" : "input", written);
    }
    const sampleLoaded = loadSample();

    return {
      versions(numbers) {
        const current = versionSelect.value;
        const wanted = ["", ...numbers.map(String)];
        const have = [...versionSelect.options].map((option) => option.value);
        if (wanted.join() === have.join()) return;
        versionSelect.replaceChildren(...wanted.map((v) => el("option", { value: v }, v || "active")));
        versionSelect.value = wanted.includes(current) ? current : "";
      },
      async ready() {
        if (built) return;
        built = true;
        await sampleLoaded;
        if (!body.value.trim()) built = await build();
        form.dataset.ready = "true";
      },
    };
  }

  window.InferaTryIt = { init };
})();
