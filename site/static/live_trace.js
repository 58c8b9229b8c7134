// The live trace page: loads Pyodide and the package's wheel from this site (_shared/),
// then on every slider move asks the page's Python (trace_page.render_json) for the schedule
// the package's own Scheduler computes, and shows it. No scheduling is done here in JS, and
// no words are: the page's Python speaks the edition's language (data-language) through the
// package's tr, and the texts shown before Python runs were drawn by it when the site was built.
const root = document.getElementById("live-trace");
const $ = (sel) => root.querySelector(sel);
const status = $(".lt-status");
const contentRoot = document.documentElement.dataset.content_root || "./";
const shared = new URL(contentRoot + root.dataset.shared, location.href);
const inputs = [...root.querySelectorAll("input")];

function fail(message) {
  root.dataset.state = "failed";
  status.textContent = root.dataset.failed.replace("{reason}", message);
}

async function fetchOk(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response;
}

async function start() {
  const manifest = await (await fetchOk(new URL("manifest.json", shared))).json();
  const { loadPyodide } = await import(new URL("pyodide/pyodide.mjs", shared).href);
  const pyodide = await loadPyodide({ indexURL: new URL("pyodide/", shared).href });
  const wheel = await (await fetchOk(new URL(manifest.wheel, shared))).arrayBuffer();
  pyodide.unpackArchive(wheel, "wheel", { extractDir: "/home/pyodide/site-packages" });
  const page = await (await fetchOk(new URL("trace_page.py", shared))).text();
  pyodide.FS.writeFile("/home/pyodide/site-packages/trace_page.py", page);
  pyodide.runPython("import sys; sys.path.insert(0, '/home/pyodide/site-packages')");
  const mod = pyodide.pyimport("trace_page");
  const info = mod.start(root.dataset.language);
  return { mod, info, version: pyodide.version };
}

function values() {
  const v = Object.fromEntries(inputs.map((i) => [i.name, i.type === "checkbox" ? i.checked : Number(i.value)]));
  for (const i of inputs) if (i.type === "range") root.querySelector(`#${i.id}-value`).textContent = i.value;
  return v;
}

function show(result) {
  const error = $(".lt-error");
  const drawn = [$(".lt-summary"), $(".lt-picture"), $(".lt-table-box")];
  if (result.error !== null) {
    error.innerHTML = "<b></b><pre></pre>" + (result.note ? "<p><i></i></p>" : "");
    error.querySelector("b").textContent = result.refused;
    error.querySelector("pre").textContent = result.error;
    if (result.note) error.querySelector("i").textContent = result.note;
    error.hidden = false;
    for (const el of drawn) el.hidden = true;
  } else {
    error.hidden = true;
    for (const el of drawn) el.hidden = false;
    $(".lt-summary").textContent = result.summary;
    $(".lt-picture").innerHTML = `<div class="lt-legend">${result.legend}</div>${result.svg}`;
    $(".lt-table").textContent = result.table;
  }
  root.dataset.renders = String(Number(root.dataset.renders) + 1);
}

try {
  const { mod, info } = await start();
  const update = () => {
    const v = values();
    let result;
    try {
      result = JSON.parse(mod.render_json(v.budget, v.decodes, v.prompt, v.threshold, v.chunked));
    } catch (e) {  // not a refused configuration (those come back as result.error): a bug
      result = { error: String(e && e.message ? e.message : e), refused: "Error", note: "" };
    }
    show(result);
  };
  for (const i of inputs) {
    i.disabled = false;
    i.addEventListener("input", update);  // sliders while they move, the checkbox on click
  }
  update();
  status.textContent = info;
  root.dataset.state = "ready";
} catch (e) {
  fail(String(e && e.message ? e.message : e));
  throw e;
}
