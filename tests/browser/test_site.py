"""The course website (``make site``, built into build/site/) in a real browser: Python's
http.server serves the folder on 127.0.0.1 (stopped by its PID, pass or fail), Debian's
chromium driven by Playwright loads every page, recording every request. Checks: no request
leaves the site, every image loaded, every internal link resolves, no element overflows the
text column, every stored widget view renders; and on the live trace page the package's own
scheduler, running in Pyodide, gives the article's chunks. Both editions (site/editions.toml):
the English at the root, zh-TW under /zh-TW/, whose live page speaks zh-TW through the package's
catalog; the language switch links each page to its counterpart. Screenshots land in
``artifacts/site/``. `make test` builds the site before running this."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

# the dashboard test's chromium, launch flags and port picker (tests/browser is on sys.path)
from test_dashboard_in_browser import CHROMIUM, CHROMIUM_ARGS, _free_port

from chunkprefill import SchedulerConfig

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("CHUNKPREFILL_SITE_DIR", ROOT / "build" / "site"))
ARTIFACTS = ROOT / "artifacts" / "site"
LOCAL_SCHEMES = ("data:", "blob:", "about:")  # never leave the machine
EDITIONS = {"": ROOT / "notebooks", "zh-TW/": ROOT / "notebooks" / "zh-TW"}  # prefix: notebooks
ZH = json.loads((ROOT / "chunkprefill" / "locale" / "zh-TW.json").read_text())  # the catalog

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The built site on http://127.0.0.1:PORT, served by its own process group."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (apt-get install "
                    "chromium); `make test` and .ci/run do this")
    if not (SITE / "index.html").exists():
        pytest.fail(f"{SITE}/index.html does not exist: build the site first (`make site`; "
                    "`make test` does)")
    built = json.loads((SITE / "_shared" / "manifest.json").read_text())["commit"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    if head and built != head:
        pytest.fail(f"{SITE} was built from commit {built[:12]}, the checkout is at "
                    f"{head[:12]}: rebuild it (`make site`; `make test` does)")
    port = _free_port()
    log = open(tmp_path_factory.mktemp("site") / "server.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(SITE)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pidfile = ARTIFACTS / "site-server.pid"
    pidfile.write_text(str(proc.pid))  # .ci/run kills it if the test run dies
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"http.server did not start (rc {proc.poll()})") from None
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        pidfile.unlink(missing_ok=True)
        log.close()


@pytest.fixture(scope="module")
def browser(site):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Recorder:
    """Every request a page makes, and every failure or error status among them."""

    def __init__(self, page) -> None:
        self.urls: list[str] = []
        self.bad: list[str] = []
        page.on("request", lambda r: self.urls.append(r.url))
        page.on("requestfailed", lambda r: self.bad.append(f"failed {r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and self.bad.append(f"{r.status} {r.url}"))

    def outside(self, base: str) -> list[str]:
        return [u for u in self.urls if not u.startswith(base) and not u.startswith(LOCAL_SCHEMES)]


def _pages() -> list[str]:
    """Every HTML page of every edition (not the theme's template files in _static/)."""
    return sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                  if not {"_static", "_sources"} & set(p.relative_to(SITE).parts))


# One pass over a loaded page: images, links, elements wider than the text column (outside
# a scrolling box), widget views that did not render.
PAGE_CHECK_JS = """() => {
  const imgs = [...document.images].map(i => ({src: i.currentSrc || i.src,
    ok: i.complete && i.naturalWidth > 0}));
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const article = document.querySelector('article.bd-article');
  const overflow = [];
  if (article) {
    const right = article.getBoundingClientRect().right;
    for (const el of article.querySelectorAll('*')) {
      const box = el.getBoundingClientRect();
      if (box.width === 0 || box.right <= right + 1) continue;
      let clipped = false;
      for (let p = el.parentElement; p && p !== article; p = p.parentElement) {
        if (getComputedStyle(p).overflowX !== 'visible'
            && p.getBoundingClientRect().right <= right + 1) { clipped = true; break; }
      }
      const by = Math.round(box.right - right);
      if (!clipped) overflow.push(`${el.tagName}.${el.className} +${by}px`);
    }
  }
  const views = document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]').length;
  const widgetErrors = (document.body.innerText.match(/Error displaying widget[^\\n]*/g) || []);
  return {imgs, links, overflow, views, widgetErrors};
}"""


def _target_ok(url: str, base: str) -> str | None:
    """None if an internal link's file (and its #fragment) is in the site, else why not."""
    parts = urlsplit(url)
    path = SITE / unquote(parts.path[len(urlsplit(base).path):])
    if path.is_dir():
        path = path / "index.html"
    if not path.is_file():
        return f"{url}: no such file"
    if parts.fragment and path.suffix == ".html":
        text = path.read_text(errors="replace")
        if not re.search(rf'id="{re.escape(unquote(parts.fragment))}"', text):
            return f"{url}: no id {parts.fragment!r}"
    return None


def test_every_page_loads_locally_with_images_links_and_widgets(site, browser):
    """Every page of the site: no request outside 127.0.0.1 (only data:/blob: URLs besides),
    no failed request, every image decoded, every internal link resolves, nothing overflows
    the text column, and every stored widget view of a notebook renders."""
    pages = _pages()
    for prefix, notebooks in EDITIONS.items():
        assert f"{prefix}index.html" in pages and f"{prefix}live_trace.html" in pages
        assert sum(p.startswith(f"{prefix}notebooks/") for p in pages) == len(
            list(notebooks.glob("[0-9][0-9]_*.ipynb")))
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    problems: list[str] = []
    checked_links: dict[str, str | None] = {}
    widget_pages = 0
    for name in pages:
        rec = Recorder(page)
        page.goto(site + name, wait_until="load")
        views = page.evaluate(PAGE_CHECK_JS)["views"]
        if views:  # the widgets' HTML manager renders the stored state after load
            widget_pages += 1
            page.wait_for_function(f"() => document.querySelectorAll('.jupyter-widgets')"
                                   f".length >= {views}", timeout=60_000)
            page.wait_for_function("() => [...document.images].every(i => i.complete)",
                                   timeout=30_000)
        if name.endswith("live_trace.html"):
            page.wait_for_function("() => document.getElementById('live-trace')"
                                   ".dataset.state !== 'loading'", timeout=180_000)
        found = page.evaluate(PAGE_CHECK_JS)
        problems += [f"{name}: request outside the site: {u}" for u in rec.outside(site)]
        problems += [f"{name}: {b}" for b in rec.bad]
        problems += [f"{name}: image not loaded: {i['src'][:120]}" for i in found["imgs"]
                     if not i["ok"]]
        problems += [f"{name}: wider than the column: {o}" for o in found["overflow"][:5]]
        problems += [f"{name}: {e}" for e in found["widgetErrors"]]
        for link in found["links"]:
            if link.startswith(site):
                if link not in checked_links:
                    checked_links[link] = _target_ok(link, site)
                if checked_links[link]:
                    problems.append(f"{name}: broken link {checked_links[link]}")
        page.close()
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.close()
    assert widget_pages > 0, "no notebook page holds a stored widget view"
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:60])


def _chunks(page) -> list[tuple[int, int]]:
    """P's prompt chunks as drawn: the picture's prefill cells of row P, in step order."""
    cells = page.eval_on_selector_all(
        '.lt-svg rect[data-request="P"][data-kind="prefill"]',
        "els => els.map(e => [Number(e.dataset.step), Number(e.dataset.tokens)])")
    return [tuple(c) for c in cells]


def _table_column(page, rid: str, steps: range) -> list[str]:
    """``rid``'s column of the table the page printed (format_trace_table) at ``steps``."""
    lines = page.locator(".lt-table").text_content().splitlines()
    col = lines[0].split().index(rid)
    rows = {int(r.split()[0]): r.split()[col] for r in lines[1:]}
    return [rows[k] for k in steps]


def _move(page, selector: str, key: str, times: int) -> None:
    """Press ``key`` on a control as a reader would, waiting for each redraw."""
    for _ in range(times):
        before = page.get_attribute("#live-trace", "data-renders")
        page.locator(selector).press(key)
        page.wait_for_function(f"() => document.getElementById('live-trace').dataset.renders"
                               f" !== '{before}'", timeout=30_000)


def _words(prefix: str) -> dict:
    """What the live page must say in an edition, for the default sliders: English as the
    package writes it, zh-TW from the compiled catalog (chunkprefill/locale/zh-TW.json, what
    `make i18n` compiled from runtime.po), filled with the hand-derived numbers."""
    summary = ("{prompt_id}'s prompt ran as {n} chunk(s) {sizes} in steps {first}-{last}; its "
               "first decode is step {decode}.")
    status = ("chunkprefill {version} on Python {python} in Pyodide; modules loaded besides the "
              "standard library: none")
    controls = ["token budget (max_num_batched_tokens)", "decoding requests",
                "prompt length of P", "long_prefill_token_threshold (0 = off)",
                "chunked prefill (enable_chunked_prefill)"]
    legend = ["prefill (prompt tokens)", "decode (1 token)", "waiting in queue",
              "running, no tokens this step", "budget left over"]
    title = "Who got how many tokens each step (token budget {budget})"
    refused = "The scheduler refuses this configuration:"
    say = (lambda m: m) if prefix == "" else (lambda m: ZH[m])
    if prefix:  # every message is translated, and differs from the English
        assert all(ZH.get(m, m) != m for m in [summary, status, title, *controls[1:], *legend])
    return {"summary": say(summary).format(prompt_id="P", n=4, sizes=[10, 10, 10, 10], first=2,
                                           last=5, decode=6),
            "status": re.escape(say(status)).replace(r"\{version\}", r"\S+").replace(
                r"\{python\}", r"\S+"),
            "controls": [say(m) for m in controls], "legend": [say(m) for m in legend],
            "title": say(title).format(budget=16), "refused": say(refused)}


@pytest.mark.parametrize("prefix", list(EDITIONS))
def test_live_trace_runs_the_packages_scheduler(site, browser, prefix):
    """The three checks, with the expected numbers derived by hand from the article's rule
    (running requests first, in admission order; P gets what the decodes leave):
    - budget 16, six decodes (1 token each), a 40-token prompt P arriving at step 2:
      16 - 6 = 10 tokens a step for P, 40 / 10 = 4 chunks of 10, in steps 2-5;
    - budget 20: 20 - 6 = 14 a step, 14 + 14 = 28, then the 12 still owed: [14, 14, 12];
    - chunking off at budget 16: the page sets max_model_len to the longest sequence,
      40 prompt + 3 output tokens = 43 > 16, which SchedulerConfig refuses (vLLM's check).
    In each edition: the words are the edition's (``_words``), the error stays vLLM's English."""
    words = _words(prefix)
    tag = f"_{prefix.strip('/')}" if prefix else ""  # screenshots' names
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    rec = Recorder(page)
    page.goto(site + prefix + "live_trace.html", wait_until="load")
    page.wait_for_function("() => document.getElementById('live-trace').dataset.state"
                           " !== 'loading'", timeout=180_000)
    status = page.locator(".lt-status").text_content()
    assert page.get_attribute("#live-trace", "data-state") == "ready", status
    assert re.fullmatch(words["status"], status), status  # nothing heavy loaded
    assert page.locator(".lt-name").all_text_contents() == words["controls"]
    assert [page.input_value(f"#lt-{k}") for k in ("budget", "decodes", "prompt", "threshold")] \
        == ["16", "6", "40", "0"]
    assert _chunks(page) == [(2, 10), (3, 10), (4, 10), (5, 10)]
    assert _table_column(page, "P", range(2, 6)) == ["10"] * 4
    assert _table_column(page, "P", range(0, 2)) == ["-", "-"]  # P arrives at step 2
    assert page.locator(".lt-summary").text_content() == words["summary"]
    assert page.locator(".lt-svg .lt-title").text_content() == words["title"]
    assert page.locator(".lt-key").all_text_contents() == words["legend"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#live-trace").screenshot(path=str(ARTIFACTS / f"live_trace{tag}_budget16.png"))

    _move(page, "#lt-budget", "ArrowRight", 4)
    assert page.input_value("#lt-budget") == "20"
    assert _chunks(page) == [(2, 14), (3, 14), (4, 12)]
    assert _table_column(page, "P", range(2, 5)) == ["14", "14", "12"]
    page.locator("#live-trace").screenshot(path=str(ARTIFACTS / f"live_trace{tag}_budget20.png"))

    _move(page, "#lt-budget", "ArrowLeft", 4)
    assert page.input_value("#lt-budget") == "16"
    before = page.get_attribute("#live-trace", "data-renders")
    page.locator("#lt-chunked").click()
    page.wait_for_function(f"() => document.getElementById('live-trace').dataset.renders"
                           f" !== '{before}'", timeout=30_000)
    error = page.locator(".lt-error")
    assert error.is_visible() and not page.locator(".lt-picture").is_visible()
    with pytest.raises(ValueError) as refused:  # the scheduler's own words, from CPython
        SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=16,
                        enable_chunked_prefill=False, max_model_len=43)
    assert error.locator("pre").text_content() == str(refused.value)
    assert "max_num_batched_tokens (16) is smaller than max_model_len (43)" in str(refused.value)
    assert error.locator("b").text_content() == words["refused"]
    page.locator("#live-trace").screenshot(path=str(ARTIFACTS / f"live_trace{tag}_no_chunking.png"))

    back = page.eval_on_selector_all("article a[href]", "as => as.map(a => a.href)")
    assert any(h.startswith(site + prefix) and re.search(r"/notebooks/02_[^/]*\.html$", h)
               for h in back), "no link to this edition's 02"
    assert not rec.outside(site) and not rec.bad, (rec.outside(site), rec.bad)
    page.close()


@pytest.mark.parametrize("prefix", list(EDITIONS))
def test_notebook_02_links_to_the_live_page(site, browser, prefix):
    """Notebook 02's text links to its edition's live trace page (the link is in the notebook:
    the zh-TW one links site/en/live_trace.md, which is the zh-TW live page in its tree)."""
    (nb02,) = (SITE / prefix / "notebooks").glob("02_*.html")
    page = browser.new_page()
    page.goto(site + f"{prefix}notebooks/{nb02.name}", wait_until="domcontentloaded")
    hrefs = page.eval_on_selector_all("article.bd-article a[href]", "as => as.map(a => a.href)")
    page.close()
    assert site + f"{prefix}live_trace.html" in hrefs, \
        f"notebook 02 ({prefix or 'en'}) does not link to its live trace page"


SWITCH_JS = """() => [...document.querySelectorAll('nav.language-switch a')].map(a =>
  ({lang: a.getAttribute('hreflang'), href: a.href}))"""


def test_the_language_switch_links_each_page_to_its_counterpart(site, browser):
    """Every page of each edition: the switch names the other edition once, and leads to the
    same page there; a notebook the other edition has not translated yet leads to that
    edition's landing page, which lists it. Then a reader's round trip by clicking."""
    pages = set(_pages())
    page = browser.new_page()
    problems = []
    for name in sorted(pages):
        mine = "zh-TW/" if name.startswith("zh-TW/") else ""
        other, lang = ("", "en") if mine else ("zh-TW/", "zh-TW")
        rel = name[len(mine):]
        page.goto(site + name, wait_until="domcontentloaded")
        links = page.evaluate(SWITCH_JS)
        want = other + rel if other + rel in pages else other + "index.html"
        if rel.startswith("notebooks/") and other + rel not in pages:
            assert other == "zh-TW/" and (EDITIONS[""] / f"{Path(rel).stem}.ipynb").exists()
        if links != [{"lang": lang, "href": site + want}]:
            problems.append(f"{name}: {links} (want {want})")
    assert not problems, "\n".join(problems[:20])
    page.goto(site + "notebooks/02_the_16_token_budget_trace.html", wait_until="load")
    page.locator('nav.language-switch a[hreflang="zh-TW"]').click()
    page.wait_for_url(site + "zh-TW/notebooks/02_the_16_token_budget_trace.html")
    assert page.locator("html").get_attribute("lang") == "zh-TW"
    page.locator('nav.language-switch a[hreflang="en"]').click()
    page.wait_for_url(site + "notebooks/02_the_16_token_budget_trace.html")
    page.close()


def test_screenshots_of_the_landing_page_and_a_notebook(site, browser):
    """For CI's artifacts (and a reader's eye): the landing page, and notebook 02 at its
    trace panel's stored default view."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.goto(site + "index.html", wait_until="load")
    page.evaluate("document.fonts.ready")
    assert "token budget 是 16" in page.locator("article").text_content()
    page.screenshot(path=str(ARTIFACTS / "landing.png"), full_page=True)
    page.goto(site + "zh-TW/index.html", wait_until="load")
    page.evaluate("document.fonts.ready")
    text = page.locator("article").text_content()
    assert "token budget 是 16" in text and "筆記本的順序" in text
    page.screenshot(path=str(ARTIFACTS / "landing_zh-TW.png"), full_page=True)
    (nb02,) = (SITE / "notebooks").glob("02_*.html")
    page.goto(site + f"notebooks/{nb02.name}", wait_until="load")
    page.wait_for_selector(".widget-slider", timeout=60_000)
    page.locator(".widget-slider").first.scroll_into_view_if_needed()
    page.evaluate("document.fonts.ready")
    time.sleep(0.5)
    page.screenshot(path=str(ARTIFACTS / "notebook_02.png"))
    page.close()
    for shot in ("landing.png", "landing_zh-TW.png", "notebook_02.png"):
        assert (ARTIFACTS / shot).stat().st_size > 10_000
