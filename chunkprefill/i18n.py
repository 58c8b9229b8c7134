"""The course's printed sentences in the reader's language (English is the source of truth).

Every sentence that code prints for a reader goes through ``tr``: one whole sentence per call,
named placeholders for the numbers, so a translator sees the sentence and can reorder it::

    print(tr("The long prompt waited {ttft_ms:.0f} ms for its first token.", ttft_ms=t))

A call with no fields prints its message as it is (braces need no doubling); a call with fields
must pass exactly the fields the message names (a ``ValueError`` says which differ). Module
constants are marked with ``N_`` (the extractor sees them) and translated where they are used,
``tr(LABELS[kind])``, never at import, so a later ``set_language`` still reaches them.

``set_language("zh-TW")`` (the first code cell of each zh-TW notebook) switches every later
call, exports ``CHUNKPREFILL_LANG`` so subprocesses follow, and points matplotlib at a CJK font.
The catalogs are JSON files compiled by ``make i18n`` from ``i18n/<language>/runtime.po``
(``chunkprefill/locale/<language>.json``). With ``CHUNKPREFILL_I18N_STRICT=1`` a sentence missing
from the catalog raises instead of falling back to English (the zh-TW build and its tests run so).
Errors that mirror vLLM's config checks stay in English: tests match them word for word.
Standard library only, so the scheduler side stays importable everywhere (Pyodide too)."""

from __future__ import annotations

import functools
import json
import os
import string
from collections.abc import Callable
from importlib import resources
from typing import Any

SOURCE_LANGUAGE = "en"
ENV_LANGUAGE = "CHUNKPREFILL_LANG"
ENV_STRICT = "CHUNKPREFILL_I18N_STRICT"
ENV_AUDIT = "CHUNKPREFILL_I18N_AUDIT"  # a file: the zh-TW build records every figure's texts
FONT_PACKAGE = "fonts-noto-cjk"        # Debian; `make fonts` installs it
# matplotlib families per language, put first in each rcParams list (Taiwan glyph forms: TC)
FONTS: dict[str, dict[str, str]] = {
    "zh-TW": {"font.sans-serif": "Noto Sans CJK TC", "font.monospace": "Noto Sans Mono CJK TC",
              "font.serif": "Noto Serif CJK TC"},
}

_language = SOURCE_LANGUAGE
_catalogs: dict[str, dict[str, str]] = {}
_default_fonts: dict[str, list[str]] = {}


def N_(message: str, /) -> str:
    """Mark ``message`` for the catalog without translating it (module constants)."""
    return message


def get_language() -> str:
    return _language


def available_languages() -> list[str]:
    """English plus every shipped catalog (``chunkprefill/locale/*.json``) or loaded one."""
    shipped = {p.name[:-len(".json")] for p in resources.files("chunkprefill").joinpath(
        "locale").iterdir() if p.name.endswith(".json")}
    return [SOURCE_LANGUAGE] + sorted(shipped | set(_catalogs))


def _load_catalog(language: str) -> dict[str, str]:
    if language not in _catalogs:
        path = resources.files("chunkprefill").joinpath("locale", f"{language}.json")
        _catalogs[language] = json.loads(path.read_text(encoding="utf-8"))
    return _catalogs[language]


def set_language(language: str) -> None:
    """Print every later ``tr`` sentence in ``language`` (``"en"`` or a shipped catalog)."""
    global _language
    allowed = available_languages()
    if language not in allowed:
        raise ValueError(f"language must be one of {allowed}, got {language!r}")
    if language != SOURCE_LANGUAGE:
        _load_catalog(language)
    configure_matplotlib(language)
    _language = language
    os.environ[ENV_LANGUAGE] = language
    if language != SOURCE_LANGUAGE and os.environ.get(ENV_AUDIT):
        _install_figure_audit(os.environ[ENV_AUDIT])


@functools.lru_cache(maxsize=4096)
def field_names(message: str) -> frozenset[str]:
    """The named ``{fields}`` of a format string (``{x.attr}``, ``{x[0]}`` name ``x``)."""
    names = set()
    for _, field, _, _ in string.Formatter().parse(message):
        if field is None:
            continue
        name = field.split(".", 1)[0].split("[", 1)[0]
        if not name or name.isdigit():
            raise ValueError(f"message must use named placeholders, got {{{field}}} in "
                             f"{message!r}")
        names.add(name)
    return frozenset(names)


def tr(message: str, /, **fields: Any) -> str:
    """``message`` in the current language, its ``{named}`` fields filled in."""
    if fields and set(fields) != field_names(message):
        raise ValueError(f"fields must be exactly the message's placeholders "
                         f"{sorted(field_names(message))}, got {sorted(fields)} for {message!r}")
    text = message
    if _language != SOURCE_LANGUAGE:
        found = _catalogs[_language].get(message)
        if found is not None:
            text = found
        elif os.environ.get(ENV_STRICT) == "1":
            raise LookupError(f"no {_language} translation for {message!r}: run `make i18n` "
                              f"and translate it in i18n/{_language}/runtime.po")
    return text.format(**fields) if fields else text


def configure_matplotlib(language: str) -> None:
    """Draw later figures with ``language``'s fonts (nothing to do where matplotlib is absent).

    A font installed after matplotlib built its font list is found by rebuilding the list once;
    a missing font raises with the command that installs it."""
    try:
        import matplotlib
        from matplotlib import font_manager
    except ImportError:
        return
    rc = matplotlib.rcParams
    for key in ("font.sans-serif", "font.monospace", "font.serif"):
        _default_fonts.setdefault(key, list(rc[key]))
        rc[key] = list(_default_fonts[key])
    for key, family in FONTS.get(language, {}).items():
        if not _has_font(font_manager, family):
            raise RuntimeError(
                f"matplotlib finds no font {family!r} for {language} figures: install Debian's "
                f"{FONT_PACKAGE} (`make fonts` as root, or `sudo apt-get install {FONT_PACKAGE}`), "
                f"then restart the kernel")
        rc[key] = [family] + [f for f in rc[key] if f != family]


def _has_font(font_manager: Any, family: str) -> bool:
    def found() -> bool:
        return any(f.name == family for f in font_manager.fontManager.ttflist)
    if found():
        return True
    loader: Callable[..., Any] | None = getattr(font_manager, "_load_fontmanager", None)
    if loader is not None:  # the cached list predates the font's install
        font_manager.fontManager = loader(try_read_cache=False)
    return found()


def figure_texts(fig: Any) -> list[dict[str, Any]]:
    """Every visible text of a drawn figure with the font that draws it first and any characters
    no font in its fallback chain has (what the zh-TW tests read back)."""
    from matplotlib import font_manager
    from matplotlib.text import Text

    records = []
    for artist in fig.findobj(Text):
        text = artist.get_text()
        if not artist.get_visible() or not text.strip():
            continue
        props = artist.get_fontproperties()
        find = getattr(font_manager.fontManager, "_find_fonts_by_props", None)
        paths = find(props) if find else [font_manager.findfont(props)]
        fonts = [font_manager.get_font(p) for p in paths]
        missing = sorted({c for c in text if not c.isspace() and ord(c) > 0x7f
                          and not any(f.get_char_index(ord(c)) for f in fonts)})
        records.append({"text": text, "font": fonts[0].family_name, "missing": "".join(missing)})
    return records


def _install_figure_audit(path: str) -> None:
    """Build-time only (``CHUNKPREFILL_I18N_AUDIT``): append each drawn figure's texts to
    ``path`` as one JSON line, so the build can store them beside the cell that drew them."""
    from matplotlib.figure import Figure

    if getattr(Figure.draw, "_i18n_audit", False):
        return
    original = Figure.draw

    @functools.wraps(original)
    def draw(self: Any, renderer: Any) -> Any:
        result = original(self, renderer)
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(figure_texts(self), ensure_ascii=False) + "\n")
        return result

    draw._i18n_audit = True  # type: ignore[attr-defined]
    Figure.draw = draw  # type: ignore[method-assign]


def _language_from_environment() -> None:
    """A subprocess of a zh-TW kernel speaks zh-TW too (the parent exported the language)."""
    global _language
    wanted = os.environ.get(ENV_LANGUAGE, SOURCE_LANGUAGE)
    if wanted != SOURCE_LANGUAGE and wanted in available_languages():
        _load_catalog(wanted)
        _language = wanted


_language_from_environment()
