"""What every exercise checker shares: a verdict the reader can act on."""

from __future__ import annotations

from chunkprefill.i18n import tr


def verdict(answer: object, expected: object, hint: str) -> str:
    """``"Right: ..."`` when ``answer == expected``; else ``"Not yet (...). Hint: ..."``.
    The expected value is computed by the caller from the package (a run of the real
    scheduler, model or simulator), so answers stay true as the code changes."""
    if answer == expected:
        return tr("Right: {expected}.", expected=repr(expected))
    return tr("Not yet ({answer}). Hint: {hint}", answer=repr(answer), hint=hint)
