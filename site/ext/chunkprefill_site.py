"""The site's own Sphinx extension: the live trace directive, the language switch and the
"source at this commit" line under every page. Configured by conf.py's ``EDITION``."""

from __future__ import annotations

import html
import inspect
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx


def page_language(edition: str) -> str:
    """The language the live page speaks: the edition's, when the package has its catalog
    (``chunkprefill/locale/<edition>.json``), else English. site/build.py runs sphinx-build
    with ``CHUNKPREFILL_LANG`` set to it, so ``tr`` here speaks it without touching
    matplotlib's fonts (``chunkprefill.i18n`` reads the variable at import)."""
    from chunkprefill.i18n import available_languages, get_language

    language = edition if edition in available_languages() else "en"
    if get_language() != language:
        raise RuntimeError(f"edition {edition}: chunkprefill.i18n speaks {get_language()!r}, "
                           f"not {language!r}: build the site with site/build.py")
    return language


def sliders() -> list[tuple[str, str, int, int, int]]:
    """The live trace's sliders: notebook 02's panel's, read from the package when the site
    is built (its ranges and its defaults, the article's trace: budget 16, six decodes, a
    40-token prompt, no threshold), named in the current language (the page's labels)."""
    import trace_page

    from chunkprefill.course.panels import trace as panel
    from chunkprefill.i18n import tr

    default = {k: p.default for k, p in inspect.signature(panel.trace_panel).parameters.items()}
    ranges = {"budget": (*panel.BUDGET_RANGE, default["budget"]),
              "decodes": (*panel.DECODES_RANGE, default["num_decodes"]),
              "prompt": (*panel.PROMPT_RANGE, default["prompt_len"]),
              "threshold": (*panel.THRESHOLD_RANGE, default["threshold"])}
    return [(key, tr(trace_page.CONTROL_LABELS[key]), *r) for key, r in ranges.items()]


class LiveTrace(Directive):
    """``{live-trace}``: the controls and the empty places the page's script fills."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        import trace_page

        from chunkprefill.i18n import tr

        edition = self.state.document.settings.env.config.chunkprefill_edition
        root, language = edition["root"], page_language(edition["edition"])
        words = {k: html.escape(tr(m)) for k, m in trace_page.PAGE_TEXTS.items()}
        rows = "".join(
            f'<label class="lt-row" for="lt-{key}"><span class="lt-name">{html.escape(text)}'
            f'</span><input type="range" id="lt-{key}" name="{key}" min="{lo}" max="{hi}" '
            f'value="{value}" disabled><output id="lt-{key}-value" for="lt-{key}">{value}'
            "</output></label>"
            for key, text, lo, hi, value in sliders())
        markup = (
            f'<div id="live-trace" class="live-trace" data-state="loading" data-renders="0" '
            f'data-shared="{root}_shared/" data-language="{language}" '
            f'data-failed="{words["failed"]}">'
            f'<form class="lt-controls" onsubmit="return false">{rows}'
            '<label class="lt-row" for="lt-chunked"><span class="lt-name">'
            f'{html.escape(tr(trace_page.CONTROL_LABELS["chunked"]))}</span><input '
            'type="checkbox" id="lt-chunked" name="chunked" checked disabled></label></form>'
            f'<p class="lt-status" role="status">{words["loading"]}</p>'
            '<div class="lt-error" role="alert" hidden></div>'
            '<p class="lt-summary"></p>'
            '<div class="lt-picture"></div>'
            f'<details class="lt-table-box" open><summary>{words["table"]}'
            '</summary><pre class="lt-table"></pre></details>'
            f"<noscript>{words['noscript']}</noscript></div>")
        return [nodes.raw("", markup, format="html")]


API_PAGES = ("api/", "_modules/")  # the API reference and its highlighted sources


def page_context(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                 doctree: nodes.document | None) -> None:
    ed = app.config.chunkprefill_edition
    if 'id="live-trace"' in context.get("body", ""):
        app.add_js_file("live_trace.js", type="module")  # this page only
    up = context.get("content_root", "./")
    # the same page in each edition; a page an edition does not have (a notebook it has not
    # translated yet, which its course path lists; the API reference, built once): its
    # landing page
    def counterpart(e: dict) -> str:
        absent = pagename in e["missing"] or (not e["own_api"] and (
            pagename.startswith(API_PAGES) or pagename == "py-modindex"))
        return "index" if absent else pagename

    context["chunkprefill_editions"] = [
        {"name": e["name"], "label": e["label"], "current": e["name"] == ed["edition"],
         "url": f"{up}{ed['root']}{e['prefix']}{counterpart(e)}.html"}
        for e in ed["editions"]]
    context["chunkprefill_words"] = ed["words"]
    source = ed.get("sources", {}).get(context.get("sourcename") or "")
    if source is None or "body" not in context:
        return
    short = ed["commit"][:12]
    if ed["repo_url"]:
        href = f"{ed['repo_url']}/blob/{ed['commit']}/{source}"
    else:
        href = context["pathto"](f"_sources/{context['sourcename']}", 1)
    link = f'<a href="{html.escape(href)}"><code>{html.escape(source)}</code></a>'
    context["body"] += ('<p class="source-at-commit">' + ed["words"]["source"].format(
        link=link, commit=f"<code>{short}</code>") + "</p>")


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
