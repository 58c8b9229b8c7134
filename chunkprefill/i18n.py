"""The course's printed sentences in the reader's language (English is the source of truth).

Every sentence that code prints for a reader goes through ``tr``: one whole sentence per call,
named placeholders for the numbers, so a translator sees the sentence and can reorder it::

    print(tr("The long prompt waited {ttft_ms:.0f} ms for its first token.", ttft_ms=t))

``set_language("zh-TW")`` (the first cell of each zh-TW notebook) switches every later call.
Errors that mirror vLLM's config checks stay in English: tests match them word for word.
Standard library only, so the scheduler side stays importable everywhere (Pyodide too)."""

from __future__ import annotations

from typing import Any

SOURCE_LANGUAGE = "en"
_language = SOURCE_LANGUAGE
_catalogs: dict[str, dict[str, str]] = {}


def get_language() -> str:
    return _language


def set_language(language: str) -> None:
    """Print every later ``tr`` sentence in ``language`` (``"en"`` or a shipped catalog)."""
    global _language
    if language != SOURCE_LANGUAGE and language not in _catalogs:
        raise ValueError(f"language must be {SOURCE_LANGUAGE!r} or one of "
                         f"{sorted(_catalogs)}, got {language!r}")
    _language = language


def tr(message: str, /, **fields: Any) -> str:
    """``message`` in the current language, its ``{named}`` fields filled in."""
    text = message if _language == SOURCE_LANGUAGE else _catalogs[_language].get(message, message)
    return text.format(**fields) if fields else text
