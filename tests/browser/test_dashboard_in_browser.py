"""End to end in a real browser: JupyterLab on loopback, Debian's chromium driven by
Playwright. Opens the chunk-size dashboard, runs all cells, moves the budget slider with
the keyboard, and checks that the widget rendered, the figure changed and no cell errored.
A screenshot lands in ``artifacts/browser/``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = os.environ.get("CHUNKPREFILL_BROWSER_NOTEBOOK", "07_chunk_size_tradeoffs.ipynb")
CHROMIUM = os.environ.get("CHUNKPREFILL_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic", "--disable-dev-shm-usage"]

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A token-less JupyterLab on 127.0.0.1 with its own config/data/runtime dirs,
    serving a copy of the notebooks (so autosave never touches the repo)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (apt-get install "
                    "chromium); `make test` and .ci/run do this")
    if not (ROOT / "notebooks" / NOTEBOOK).exists():
        pytest.fail(f"notebooks/{NOTEBOOK} does not exist")
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "notebooks"
    shutil.copytree(ROOT / "notebooks", root)
    env = dict(os.environ)
    for name in ("CONFIG", "DATA", "RUNTIME"):
        (tmp / name.lower()).mkdir()
        env[f"JUPYTER_{name}_DIR"] = str(tmp / name.lower())
    # JupyterLab 4.6 keeps this setting in the notebook tracker's schema.
    settings = tmp / "config" / "lab" / "user-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps(
        {"autoStartDefaultKernel": True}))
    port = _free_port()
    log = open(tmp / "lab.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", "--ServerApp.token=", "--ServerApp.password=",
         "--ServerApp.disable_check_xsrf=True", "--allow-root",
         "--LabApp.expose_app_in_browser=True",
         f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "jupyterlab.pid").write_text(str(proc.pid))  # .ci/run kills it if we die
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=2)
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError((tmp / "lab.log").read_text()) from None
            time.sleep(0.5)
    else:
        raise RuntimeError("JupyterLab did not start in 90 s:\n" + (tmp / "lab.log").read_text())
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    (ARTIFACTS / "jupyterlab.pid").unlink(missing_ok=True)
    log.close()


def _wait_kernel_idle(page, timeout_s: float) -> None:
    """Wait until the kernel is idle; dismiss a 'Select Kernel' dialog if one appears."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if dialog.count():
            dialog.first.click()
        status = page.evaluate(
            "() => { const w = window.jupyterapp.shell.currentWidget;"
            " return w && w.sessionContext && w.sessionContext.session &&"
            " w.sessionContext.session.kernel ? w.sessionContext.session.kernel.status : null }")
        if status == "idle":
            return
        time.sleep(0.5)
    raise AssertionError(f"kernel not idle after {timeout_s} s (status {status!r})")


# Errors as the notebook model holds them (JupyterLab 4.6 renders a traceback without the
# ``application/vnd.jupyter.error`` mime attribute the DOM once carried): every code cell's
# outputs, an ``error`` output or a traceback on stderr, with the cell that raised it.
CELL_ERRORS_JS = """() => {
  const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
  const bad = [];
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== 'code') continue;
    for (const o of cell.outputs.toJSON()) {
      const text = o.output_type === 'error' ? `${o.ename}: ${o.evalue}`
        : (o.output_type === 'stream' && o.name === 'stderr' ? [].concat(o.text).join('') : '');
      if (o.output_type === 'error' || /Traceback|Error:/.test(text)) {
        bad.push(`cell ${i} (${cell.sharedModel.getSource().split('\\n')[0].slice(0, 80)}): `
                 + text.slice(0, 1500));
      }
    }
  }
  return bad;
}"""


def _cell_errors(page) -> list[str]:
    return page.evaluate(CELL_ERRORS_JS)


PANEL_IMG_JS = """() => {
  const slider = document.querySelector('.widget-slider');
  const panel = slider && slider.closest('.jp-OutputArea-output');
  const imgs = panel ? [...panel.querySelectorAll('img')] : [];
  return imgs.length ? imgs[imgs.length - 1].src : '';
}"""


def _figure_src(page) -> str:
    """The figure inside the output area that holds the first slider (the dashboard)."""
    return page.evaluate(PANEL_IMG_JS)


def _scroll_into_view(page, locator, timeout_s: float = 30) -> None:
    """Scroll until ``locator`` is in the viewport and stays there. JupyterLab renders the
    notebook's cells lazily: right after a scroll, cells above the target get measured, the
    page grows and the target slides out of view again, so one
    ``scroll_into_view_if_needed`` is not enough before a screenshot."""
    deadline = time.time() + timeout_s
    height = page.viewport_size["height"]
    last = None
    while time.time() < deadline:
        locator.scroll_into_view_if_needed()
        time.sleep(0.5)
        box = locator.bounding_box()
        if box is not None and 0 <= box["y"] and box["y"] + box["height"] <= height \
                and box == last:
            return
        last = box
    raise AssertionError(f"{locator} did not settle in the viewport in {timeout_s} s")


def test_dashboard_runs_and_slider_redraws(lab):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{lab}/lab/tree/{NOTEBOOK}", wait_until="domcontentloaded")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell"
                                   " && window.jupyterapp.shell.currentWidget", timeout=90_000)
            _wait_kernel_idle(page, 120)
            page.evaluate("() => window.jupyterapp.commands.execute("
                          "'notebook:run-all-cells')")
            time.sleep(2)
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-InputPrompt')]"
                ".every(p => !p.textContent.includes('*'))", timeout=300_000)
            _wait_kernel_idle(page, 300)
            errors = _cell_errors(page)
            assert not errors, "a cell failed: " + "\n".join(errors)
            slider = page.locator(".widget-slider .noUi-handle, .widget-slider .ui-slider-handle")
            assert slider.count() > 0, "no slider widget rendered"
            handle = slider.first
            _scroll_into_view(page, handle)  # both screenshots show the dashboard
            page.screenshot(path=str(ARTIFACTS / "dashboard_before.png"), full_page=False)
            before = _figure_src(page)
            assert before, "no figure rendered"
            handle.focus()
            handle.press("ArrowRight")
            handle.press("ArrowRight")
            page.wait_for_function(f"(before) => ({PANEL_IMG_JS})() !== before", arg=before,
                                   timeout=60_000)
            _wait_kernel_idle(page, 120)
            _scroll_into_view(page, handle)
            page.screenshot(path=str(ARTIFACTS / "dashboard_after.png"), full_page=False)
            assert _figure_src(page) != before
            errors = _cell_errors(page)
            assert not errors, "a cell failed: " + "\n".join(errors)
        finally:
            page.screenshot(path=str(ARTIFACTS / "dashboard_last.png"))
            browser.close()
