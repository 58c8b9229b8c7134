"""What every panel shares: a figure as PNG bytes for an ipywidgets Image."""

from __future__ import annotations

import io

from matplotlib.figure import Figure


def figure_png(fig: Figure, dpi: int = 72) -> bytes:
    """PNG bytes of a figure, for an ``ipywidgets.Image`` (it shows without a kernel, on the
    web too). Plain ``savefig``; zlib level 1 halves the encoding time of the default level
    for a few % more bytes. Redraws stay fast because the figures are built for it: the
    trace panel redraws one figure in place, its cell numbers are stamped outlines
    (``plots.schedule.CellNumbers``), and the dashboard's pictures are drawn once, ahead of time."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    return buf.getvalue()
