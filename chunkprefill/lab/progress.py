"""A progress report of measured runs that a stored notebook keeps as ONE line.

In a Jupyter kernel the line is a display updated in place (``display_id``), so the saved
notebook holds only its final state; elsewhere (a terminal, a benchmark) a plain ``tqdm``
bar on stderr. IPython is only touched when it is already running."""

from __future__ import annotations

import sys
import time
from typing import Any

from chunkprefill.i18n import tr


def _kernel_display() -> Any:
    """``IPython.display.display`` inside a running kernel, else None."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or getattr(shell, "kernel", None) is None:
        return None
    from IPython.display import display

    return display


class Progress:
    """``total`` runs, reported on one line: ``update()`` after each, ``close()`` at the end
    (or use it as a context manager)."""

    def __init__(self, total: int, desc: str = "measured runs") -> None:
        self.total, self.done, self.desc = total, 0, desc
        self._start = time.perf_counter()
        display = _kernel_display()
        self._handle: Any = None
        self._bar: Any = None
        if display is not None:
            from IPython.display import Pretty

            self._handle = display(Pretty(self._line()), display_id=True)
        else:
            from tqdm.std import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="run")

    def _line(self) -> str:
        return tr("{desc}: {done} of {total} done ({seconds:.0f} s)", desc=self.desc,
                  done=self.done, total=self.total, seconds=time.perf_counter() - self._start)

    def update(self) -> None:
        self.done += 1
        if self._handle is not None:
            from IPython.display import Pretty

            self._handle.update(Pretty(self._line()))
        elif self._bar is not None:
            self._bar.update()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
