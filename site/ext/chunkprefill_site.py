"""The site's own Sphinx extension: the live trace directive, the language switch and the
"source at this commit" line under every page. Configured by conf.py's ``EDITION``."""

from __future__ import annotations

import html
import inspect
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx


def sliders() -> list[tuple[str, str, int, int, int]]:
    """The live trace's sliders: notebook 02's panel's, read from the package when the site
    is built (its ranges and its defaults, the article's trace: budget 16, six decodes, a
    40-token prompt, no threshold)."""
    from chunkprefill.course.panels import trace as panel

    default = {k: p.default for k, p in inspect.signature(panel.trace_panel).parameters.items()}
    return [("budget", "token budget (max_num_batched_tokens)", *panel.BUDGET_RANGE,
             default["budget"]),
            ("decodes", "decoding requests", *panel.DECODES_RANGE, default["num_decodes"]),
            ("prompt", "prompt length of P", *panel.PROMPT_RANGE, default["prompt_len"]),
            ("threshold", "long_prefill_token_threshold (0 = off)", *panel.THRESHOLD_RANGE,
             default["threshold"])]


class LiveTrace(Directive):
    """``{live-trace}``: the controls and the empty places the page's script fills."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        root = self.state.document.settings.env.config.chunkprefill_edition["root"]
        rows = "".join(
            f'<label class="lt-row" for="lt-{key}"><span class="lt-name">{html.escape(text)}'
            f'</span><input type="range" id="lt-{key}" name="{key}" min="{lo}" max="{hi}" '
            f'value="{value}" disabled><output id="lt-{key}-value" for="lt-{key}">{value}'
            "</output></label>"
            for key, text, lo, hi, value in sliders())
        markup = (
            f'<div id="live-trace" class="live-trace" data-state="loading" data-renders="0" '
            f'data-shared="{root}_shared/">'
            f'<form class="lt-controls" onsubmit="return false">{rows}'
            '<label class="lt-row" for="lt-chunked"><span class="lt-name">chunked prefill '
            '(enable_chunked_prefill)</span><input type="checkbox" id="lt-chunked" '
            'name="chunked" checked disabled></label></form>'
            '<p class="lt-status" role="status">Loading Python (Pyodide) and chunkprefill '
            "into this page… (about 13 MB, once)</p>"
            '<div class="lt-error" role="alert" hidden></div>'
            '<p class="lt-summary"></p>'
            '<div class="lt-picture"></div>'
            '<details class="lt-table-box" open><summary>The table (format_trace_table)'
            '</summary><pre class="lt-table"></pre></details>'
            "<noscript>This page runs the scheduler in your browser: it needs JavaScript."
            "</noscript></div>")
        return [nodes.raw("", markup, format="html")]


def page_context(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                 doctree: nodes.document | None) -> None:
    ed = app.config.chunkprefill_edition
    if 'id="live-trace"' in context.get("body", ""):
        app.add_js_file("live_trace.js", type="module")  # this page only
    up = context.get("content_root", "./")
    context["chunkprefill_editions"] = [
        {"name": e["name"], "label": e["label"], "current": e["name"] == ed["edition"],
         "url": f"{up}{ed['root']}{e['prefix']}{pagename}.html"} for e in ed["editions"]]
    source = ed.get("sources", {}).get(context.get("sourcename") or "")
    if source is None or "body" not in context:
        return
    short = ed["commit"][:12]
    if ed["repo_url"]:
        href = f"{ed['repo_url']}/blob/{ed['commit']}/{source}"
    else:
        href = context["pathto"](f"_sources/{context['sourcename']}", 1)
    context["body"] += (
        f'<p class="source-at-commit">Source: <a href="{html.escape(href)}">'
        f"<code>{html.escape(source)}</code></a> at commit <code>{short}</code></p>")


def drop_problematic_links(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """A docstring with broken markup (docutils reports it when the site is built) shows as
    its plain text, not as a link to an error message the page does not hold."""
    for node in list(doctree.findall(nodes.problematic)):
        plain = nodes.inline(node.rawsource, node.astext())
        plain["ids"] = node["ids"]
        node.replace_self(plain)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("chunkprefill_edition", {}, "html")  # conf.py sets it
    app.add_directive("live-trace", LiveTrace)
    app.connect("html-page-context", page_context)
    app.connect("doctree-resolved", drop_problematic_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
