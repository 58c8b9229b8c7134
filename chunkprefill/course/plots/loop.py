"""The engine loop as a picture: ``schedule()`` -> the model runs -> ``update_from_output()``,
once per step. The labels are the package's own names (taken from the classes, so a rename
breaks this figure instead of leaving it stale)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from chunkprefill.i18n import tr
from chunkprefill.scheduler import Scheduler

# (x, y) centres of the three boxes on a 10 x 6 canvas
_BOXES = {
    "schedule": (2.0, 4.2),
    "execute": (8.0, 4.2),
    "update_from_output": (5.0, 1.2),
}


def loop_names() -> dict[str, str]:
    """The call each box stands for, read from the package (a rename shows here)."""
    return {"schedule": f"{Scheduler.__name__}.{Scheduler.schedule.__name__}()",
            "execute": tr("model forward (executor)"),
            "update_from_output": f"{Scheduler.__name__}."
                                  f"{Scheduler.update_from_output.__name__}()"}


def plot_engine_loop() -> Figure:
    """One step of the engine loop: what each call hands the next. Returns a pyplot-free
    figure."""
    names = loop_names()
    fig = Figure(figsize=(9, 4.6), layout="constrained")
    ax = fig.add_subplot()
    ax.set(xlim=(0, 10), ylim=(0, 6))
    ax.axis("off")
    for key, (x, y) in _BOXES.items():
        ax.add_patch(FancyBboxPatch((x - 1.7, y - 0.45), 3.4, 0.9, boxstyle="round,pad=0.1",
                                    facecolor="#e8f0fb", edgecolor="tab:blue"))
        ax.text(x, y, names[key], ha="center", va="center", fontsize=10, family="monospace")
    arrows = [  # (from, to, label, label position, curvature)
        ("schedule", "execute",
         tr("SchedulerOutput: {mapping} within the\n"
            "budget (num_computed_tokens already advanced)",
            mapping="{request_id: num_tokens}"),
         (5.0, 5.25), 0.0),
        ("execute", "update_from_output",
         tr("sampled token ids\n(only requests that owe nothing)"), (8.3, 2.3), 0.0),
        ("update_from_output", "schedule",
         tr("tokens appended, finished\nrequests free their KV blocks"), (1.0, 2.6), 0.0),
    ]
    for src, dst, label, (lx, ly), rad in arrows:
        (x0, y0), (x1, y1) = _BOXES[src], _BOXES[dst]
        start = (x0 + 1.8, y0) if src == "schedule" else ((x0 - 0.6, y0 - 0.55)
                                                          if src == "execute" else (x0 - 1.8, y0))
        end = (x1 - 1.8, y1) if dst == "execute" else ((x1 + 1.8, y1)
                                                       if dst == "update_from_output"
                                                       else (x1 - 0.2, y1 - 0.55))
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=18,
                                     color="0.3", connectionstyle=f"arc3,rad={rad}"))
        ax.text(lx, ly, label, ha="center", va="center", fontsize=8.5)
    ax.text(0.1, 5.85, tr("add_request() -> waiting queue"), fontsize=8.5, color="0.35", va="top")
    ax.set_title(tr("One step of the engine loop (repeats until no request is unfinished)"),
                 fontsize=11)
    return fig
