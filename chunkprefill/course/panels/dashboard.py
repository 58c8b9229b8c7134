"""Interactive panels, PythonDataScienceHandbook style: a plain function computes and renders
(tests call it), and a thin ipywidgets wrapper only wires sliders to it. ipywidgets is
imported inside the wrappers, so importing this module stays light."""

from __future__ import annotations

import dataclasses
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.experiments import (
    BudgetPoint,
    MixedResult,
    MixedWorkload,
    mixed_scheduler_config,
    run_mixed,
)
from chunkprefill.timing import clock_label
from chunkprefill.trace import (
    TraceRequest,
    TraceStep,
    format_trace_table,
    run_trace,
    seed_trace_requests,
)
from chunkprefill.viz import plot_chunk_dashboard, plot_trace_overview, split_prefill_decode

# Slider ranges of the trace panel: wide enough to reach every regime of the seed's trace
# (budget below the number of decodes, threshold on/off, prompt shorter or longer than the
# budget), small enough that the slowest corner (budget 1: ~450 steps) still redraws fast.
BUDGET_RANGE = (1, 128)
DECODES_RANGE = (0, 16)
PROMPT_RANGE = (1, 128)
THRESHOLD_RANGE = (0, 64)
CHUNKED_MAX_MODEL_LEN = 8192  # the CLI's default
MAX_TABLE_ROWS = 30


def trace_scheduler_config(
    budget: int, num_decodes: int, prompt_len: int, threshold: int, chunked: bool = True,
    decode_len: int = 20, prompt_output_len: int = 3,
) -> SchedulerConfig:
    """The panel's ``SchedulerConfig``. ``max_num_seqs = min(128, budget)`` as in the CLI.

    ``max_model_len``: with chunking on, 8192 (the CLI default; it never binds here). With
    chunking off it is the longest sequence of this workload, ``max(prompt_len +
    prompt_output_len, 1 + decode_len)``: the smallest context window that serves every
    request untruncated. vLLM then demands ``budget >= max_model_len``, so the toggle shows
    the seed's point: without chunking a budget below the prompt cannot accept it at all,
    and the config check says so. (A fixed 8192 would refuse every slider position.)
    Raises the ``ValueError`` of ``SchedulerConfig`` for a combination it refuses."""
    max_model_len = (CHUNKED_MAX_MODEL_LEN if chunked
                     else max(prompt_len + prompt_output_len, 1 + decode_len))
    return SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=min(128, budget),
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=threshold,
        max_model_len=max_model_len,
    )


def _prompt_summary(
    steps: Sequence[TraceStep], requests: Sequence[TraceRequest], prompt_id: str = "P"
) -> str:
    """One line on the long prompt: its chunks, and the step of its first decode."""
    chunks, first_decode = [], None
    for s, cells in zip(steps, split_prefill_decode(steps, requests), strict=True):
        cell = cells.get(prompt_id)
        if cell is None:
            continue
        if cell.prefill:
            chunks.append((s.step, cell.prefill))
        elif first_decode is None:
            first_decode = s.step
    sizes = [n for _, n in chunks]
    where = (f"step {chunks[0][0]}" if len(chunks) == 1
             else f"steps {chunks[0][0]}-{chunks[-1][0]}")
    line = f"{prompt_id}'s prompt ran as {len(chunks)} chunk(s) {sizes} in {where}"
    if first_decode is not None:
        line += f"; its first decode is step {first_decode}"
    return line + "."


def trace_panel_update(
    budget: int, num_decodes: int, prompt_len: int, threshold: int, chunked: bool = True,
    decode_len: int = 20, prompt_output_len: int = 3, arrival_step: int = 2,
    block_size: int = 16, num_blocks: int = 1000, max_table_rows: int = MAX_TABLE_ROWS,
    fig: Figure | None = None,
) -> tuple[str, Figure | None, str | None]:
    """Run the seed's workload (``num_decodes`` decoding requests, then a ``prompt_len``
    prompt P arriving at ``arrival_step``) and render it: ``(table_text, figure, error)``.

    A combination the scheduler refuses returns ``("", None, message)`` where ``message`` is
    the scheduler's own ``ValueError`` text, so the panel can show the reason instead of a
    traceback. ``table_text`` is a one-line summary of P's chunks, then the first
    ``max_table_rows`` rows of ``format_trace_table``. ``fig``: a figure an earlier call
    returned, redrawn with this trace instead of a new one being built (the panel passes
    its own, which saves the axes and tick labels a new figure would build)."""
    try:
        config = trace_scheduler_config(budget, num_decodes, prompt_len, threshold, chunked,
                                        decode_len, prompt_output_len)
        requests = seed_trace_requests(num_decodes, prompt_len, decode_len, arrival_step,
                                       prompt_output_len)
        steps = run_trace(requests, config, CacheConfig(block_size, num_blocks))
    except ValueError as e:
        return "", None, str(e)
    lines = [_prompt_summary(steps, requests), "", format_trace_table(steps[:max_table_rows])]
    if len(steps) > max_table_rows:
        lines.append(f"... {len(steps) - max_table_rows} more steps (see the picture)")
    return "\n".join(lines), plot_trace_overview(steps, requests, fig), None


def trace_panel(
    budget: int = 16, num_decodes: int = 6, prompt_len: int = 40, threshold: int = 0,
    chunked: bool = True,
) -> Any:
    """The seed's trace with sliders: budget, decodes, prompt length, threshold, and a
    chunked-prefill toggle. Returns an ``ipywidgets.VBox`` of two rows: first the controls
    (a VBox) beside an HTML widget with the summary + table or the scheduler's error, then an
    Image with the timeline and budget bars. Sliders update on release."""
    import ipywidgets as w

    def slider(desc: str, value: int, rng: tuple[int, int]) -> Any:
        return w.IntSlider(value=value, min=rng[0], max=rng[1], description=desc,
                           continuous_update=False, style={"description_width": "140px"},
                           layout=w.Layout(width="420px"))

    controls = {
        "budget": slider("token budget", budget, BUDGET_RANGE),
        "num_decodes": slider("decodes", num_decodes, DECODES_RANGE),
        "prompt_len": slider("prompt length (P)", prompt_len, PROMPT_RANGE),
        "threshold": slider("long_prefill threshold", threshold, THRESHOLD_RANGE),
        "chunked": w.Checkbox(value=chunked, description="chunked prefill"),
    }
    text = w.HTML(layout=w.Layout(flex="1 1 auto", margin="0 0 0 16px"))
    image = w.Image(format="png", layout=w.Layout(max_width="100%"))
    drawn: list[Figure] = []  # the panel's one figure, redrawn on every move

    def render(_change: object = None) -> None:
        table, fig, error = trace_panel_update(**{k: c.value for k, c in controls.items()},
                                               fig=drawn[0] if drawn else None)
        if error is not None:
            note = ("" if controls["chunked"].value else
                    "<br><i>With chunking off, this panel sets max_model_len to the longest "
                    "sequence of the workload: raise the budget to it, or tick chunking.</i>")
            text.value = ("<b>The scheduler refuses this configuration:</b>"
                          "<pre style='color:#a00; white-space:pre-wrap; word-break:normal'>"
                          f"{html.escape(error)}</pre>{note}")
            image.value = b""
            image.layout.display = "none"  # no broken-image icon under the message
            return
        drawn[:] = [fig]  # type: ignore[list-item]
        text.value = f"<pre style='font-size:11px'>{html.escape(table)}</pre>"
        image.value = figure_png(fig)  # type: ignore[arg-type]
        image.layout.display = None

    for c in controls.values():
        c.observe(render, names="value")
    render()
    sliders = w.VBox(list(controls.values()), layout=w.Layout(flex="0 0 auto", min_width="430px"))
    return w.VBox([w.HBox([sliders, text]), image])


# ------------------------------------------------------------------ chunk-size dashboard (06)
# A measured run of the toy model takes seconds, far above the 150 ms a slider may take, so
# the dashboard reads a cache of measured runs (and their rendered pictures) that
# ``ChunkDashboardData.precompute`` fills with a progress bar. A slider position outside it
# is measured on first visit (the panel says so) and cached from then on.

DASH_BUDGETS = (32, 64, 128, 256, 512, 1024, 2048)
DASH_THRESHOLDS = (0, 32, 64, 128, 256, 512, 1024)
DASH_LONG_LENS = (256, 512, 768, 1024)
DASH_DECODES = (4, 8, 16, 32)
DASH_RATES = (5.0, 10.0, 20.0, 40.0, 80.0)
DASH_MAX_MODEL_LEN = 2048  # with chunking on; with it off, the workload's longest sequence


def available_devices() -> list[str]:
    """Device/backend choices for this machine, best first: ``"cuda · triton"`` and
    ``"cuda · torch"`` when a CUDA GPU is there, always ``"cpu · torch"`` (Triton on a CPU
    only runs in its interpreter: far too slow to time)."""
    import torch

    cpu = ["cpu · torch"]
    return (["cuda · triton", "cuda · torch"] + cpu) if torch.cuda.is_available() else cpu


def _parse_device(label: str) -> tuple[str, str]:
    device, _, backend = label.partition(" · ")
    if device not in ("cpu", "cuda") or backend not in ("torch", "triton"):
        raise ValueError(f"device must look like 'cpu · torch' or 'cuda · triton', got {label!r}")
    return device, backend


def timing_label(device_label: str) -> str:
    """How a device's runs are timed (``timing.clock_label``), for every figure and summary
    that shows them."""
    device, _ = _parse_device(device_label)
    return clock_label(device)


@dataclass(frozen=True)
class DashboardKey:
    """One dashboard position. ``threshold`` is stored canonically: a threshold that can
    never bind (>= the budget, or >= the longest sequence) schedules exactly like 0."""

    device: str
    long_prompt_len: int
    num_decodes: int
    rate: float
    chunked: bool
    budget: int
    threshold: int

    @property
    def row(self) -> tuple[str, int, int, float]:
        """The workload and device: positions of one row share a budget sweep."""
        return (self.device, self.long_prompt_len, self.num_decodes, self.rate)


@dataclass
class DashboardView:
    """What one dashboard position shows: a text summary and the picture (PNG bytes), or
    the scheduler's error for a configuration it refuses. ``source``: ``"precomputed"``,
    ``"measured now"`` or ``"refused"``."""

    text: str
    png: bytes | None
    error: str | None
    source: str
    result: MixedResult | None = None


class ChunkDashboardData:
    """Measured runs of a ``MixedWorkload`` on the toy model, cached by dashboard position,
    plus the rendered picture of each. ``base`` is the workload the sliders vary (long
    prompt length, number of decodes, arrival rate); ``model_config`` the toy model
    (``ModelConfig.small()`` by default; one model per device, built on first use)."""

    def __init__(self, base: MixedWorkload | None = None, model_config: Any = None,
                 max_model_len: int = DASH_MAX_MODEL_LEN, seed: int = 0) -> None:
        from chunkprefill.config import ModelConfig

        self.base = base or MixedWorkload()
        self.model_config = model_config or ModelConfig.small()
        self.max_model_len = max_model_len
        self.seed = seed
        self.budgets: tuple[int, ...] = DASH_BUDGETS  # the sweep every position shows
        self.runs: dict[DashboardKey, MixedResult] = {}
        self.pngs: dict[DashboardKey, bytes] = {}
        self._models: dict[str, Any] = {}

    # -- positions ------------------------------------------------------------------
    def workload(self, long_prompt_len: int | None = None, num_decodes: int | None = None,
                 rate: float | None = None) -> MixedWorkload:
        b = self.base
        return dataclasses.replace(
            b, long_prompt_len=b.long_prompt_len if long_prompt_len is None else long_prompt_len,
            num_decodes=b.num_decodes if num_decodes is None else num_decodes,
            rate=b.rate if rate is None else float(rate))

    def key(self, budget: int, threshold: int = 0, long_prompt_len: int | None = None,
            num_decodes: int | None = None, rate: float | None = None, chunked: bool = True,
            device: str | None = None) -> DashboardKey:
        wl = self.workload(long_prompt_len, num_decodes, rate)
        device = device or available_devices()[0]
        _parse_device(device)
        if threshold >= budget or threshold >= wl.max_seq_len:
            threshold = 0
        return DashboardKey(device, wl.long_prompt_len, wl.num_decodes, wl.rate, chunked,
                            budget, threshold)

    def workload_of(self, key: DashboardKey) -> MixedWorkload:
        return self.workload(key.long_prompt_len, key.num_decodes, key.rate)

    def scheduler_config(self, key: DashboardKey) -> SchedulerConfig:
        """Raises the ``SchedulerConfig``'s ``ValueError`` for a refused combination."""
        return mixed_scheduler_config(self.workload_of(key), key.budget, key.threshold,
                                      key.chunked, self.max_model_len)

    # -- measuring ------------------------------------------------------------------
    def model(self, device_label: str) -> Any:
        """The toy model on that device, built and warmed up on first use."""
        if device_label not in self._models:
            import torch

            from chunkprefill.model import ToyTransformer

            device, backend = _parse_device(device_label)
            model = ToyTransformer(self.model_config, seed=self.seed).to(device)
            wl = MixedWorkload(num_decodes=2, num_long=1, long_prompt_len=64,
                               vocab_size=self.model_config.vocab_size)
            with torch.inference_mode():  # warm-up: first calls allocate and compile
                run_mixed(model, wl, mixed_scheduler_config(wl, 64), attention_backend=backend,
                          device=device)
            self._models[device_label] = model
        return self._models[device_label]

    def measure(self, key: DashboardKey) -> MixedResult:
        """The run at ``key``: from the cache, else measured now (and cached)."""
        if key not in self.runs:
            config = self.scheduler_config(key)
            device, backend = _parse_device(key.device)
            wl = self.workload_of(key)
            if wl.vocab_size > self.model_config.vocab_size:
                wl = dataclasses.replace(wl, vocab_size=self.model_config.vocab_size)
            self.runs[key] = run_mixed(self.model(key.device), wl, config,
                                       attention_backend=backend, device=device)
            for k in [k for k in self.pngs if k.row == key.row]:
                del self.pngs[k]  # their sweep plot gains a point
        return self.runs[key]

    def reference_key(self, key: DashboardKey) -> DashboardKey | None:
        """The no-chunking baseline of ``key``'s row: chunking off, threshold 0, the
        smallest dashboard budget that can hold the longest sequence."""
        need = self.workload_of(key).max_seq_len
        budget = next((b for b in self.budgets if b >= need), None)
        if budget is None:
            return None
        return DashboardKey(*key.row, chunked=False, budget=budget, threshold=0)

    def row_keys(self, key: DashboardKey) -> list[DashboardKey]:
        """Every run ``key``'s picture draws: its row's sweep (the budget grid and any other
        budget measured in the row, chunked, at ``key``'s threshold), the no-chunking
        baseline, and ``key`` itself."""
        threshold = key.threshold if key.chunked else 0
        budgets = sorted({*self.budgets, *(k.budget for k in self.runs if k.row == key.row
                                             and k.chunked and k.threshold == threshold)})
        keys = [self.key(b, threshold, key.long_prompt_len, key.num_decodes, key.rate, True,
                         key.device) for b in budgets]
        ref = self.reference_key(key)
        return list(dict.fromkeys([*keys, *([ref] if ref else []), key]))

    def complete_row(self, key: DashboardKey, progress: Any = None) -> list[DashboardKey]:
        """Measure what ``key``'s picture needs and is not cached yet, so its sweep panel is
        never a lone point; then (re)draw the pictures of every position of the row, so
        moving along it is a lookup. ``progress(done, total)`` is called after each run."""
        todo = [k for k in self.row_keys(key) if k not in self.runs]
        for i, k in enumerate(todo):
            self.measure(k)
            if progress is not None:
                progress(i + 1, len(todo))
        keys = self.row_keys(key)
        for k in keys:
            if k.chunked == key.chunked or k == key:
                self.png(k)
        return keys

    def precompute(self, budgets: Sequence[int] = DASH_BUDGETS, thresholds: Sequence[int] = (0,),
                   long_prompt_len: int | None = None, num_decodes: int | None = None,
                   rate: float | None = None, device: str | None = None,
                   progress: bool = True) -> list[DashboardKey]:
        """Make ``budgets`` the sweep grid and measure one workload's sweep at each
        threshold (chunked; chunking off at each budget that can hold the longest sequence,
        the no-chunking baseline among them), drawing every position's picture. A plain-text
        progress bar (``tqdm``) keeps its final state in a stored notebook. Returns the keys."""
        self.budgets = tuple(budgets)
        keys = [self.key(b, t, long_prompt_len, num_decodes, rate, True, device)
                for t in thresholds for b in budgets]
        need = self.workload(long_prompt_len, num_decodes, rate).max_seq_len
        keys += [self.key(b, 0, long_prompt_len, num_decodes, rate, False, device)
                 for b in budgets if b >= need]
        ref = self.reference_key(keys[0]) if keys else None
        keys = list(dict.fromkeys([*keys, *([ref] if ref else [])]))
        bar: Any = None
        if progress:
            from tqdm.std import tqdm

            bar = tqdm(total=sum(k not in self.runs for k in keys), desc="measured runs",
                       unit="run")
        for k in keys:
            if k not in self.runs:
                self.measure(k)
                if bar is not None:
                    bar.update()
        if bar is not None:
            bar.close()
        for k in keys:
            self.png(k)
        return keys

    # -- reading ----------------------------------------------------------------------
    def sweep_points(self, key: DashboardKey) -> list[BudgetPoint]:
        """Measured points of ``key``'s row at its threshold (cached runs only), plus the
        no-chunking baseline if measured."""
        pts = [r.point() for k, r in sorted(self.runs.items(), key=lambda kv: kv[0].budget)
               if k.row == key.row and k.chunked and k.threshold == key.threshold]
        ref = self.reference_key(key)
        if ref is not None and ref in self.runs:
            pts.append(self.runs[ref].point())
        return pts

    def figure(self, key: DashboardKey) -> Figure:
        """The dashboard picture at ``key`` (measures if needed)."""
        result = self.measure(key)
        ref_key = self.reference_key(key) if key.chunked else dataclasses.replace(
            key, chunked=True, threshold=0)
        ref = self.runs.get(ref_key) if ref_key is not None and ref_key != key else None
        here = _short_label(key)
        itl, ttft = {here: result.itl}, {here: result.ttft}
        if ref is not None:
            itl[_short_label(ref_key)] = ref.itl
            ttft[_short_label(ref_key)] = ref.ttft
        wl = self.workload_of(key)
        title = (f"{_short_label(key)}, threshold {key.threshold} | {wl.num_decodes} short + "
                 f"{wl.num_long} long ({wl.long_prompt_len}-token) prompts at {wl.rate:g} req/s"
                 f" | {key.device} [{timing_label(key.device)}]")
        return plot_chunk_dashboard(result.metrics, result.long_ids, self.sweep_points(key),
                                    key.budget if key.chunked else None, itl, ttft, title)

    def png(self, key: DashboardKey) -> bytes:
        if key not in self.pngs:
            self.pngs[key] = figure_png(self.figure(key))
        return self.pngs[key]


def _short_label(key: DashboardKey) -> str:
    return f"budget {key.budget}" if key.chunked else f"no chunking ({key.budget})"


def dashboard_summary(data: ChunkDashboardData, key: DashboardKey, result: MixedResult) -> str:
    """The text beside the picture: the percentiles, the long prompts' TTFT, the step that
    took longest, and against the no-chunking baseline if it is measured."""
    wl = data.workload_of(key)
    ms = 1e3
    itl, ttft = result.itl, result.ttft
    lines = [
        f"{'chunked prefill' if key.chunked else 'chunking OFF'}, budget {key.budget}, "
        f"long_prefill_token_threshold {key.threshold}",
        f"{wl.num_decodes} short requests + {wl.num_long} long prompts of "
        f"{wl.long_prompt_len} tokens,", f"Poisson arrivals at {wl.rate:g} req/s",
        f"{key.device} [{timing_label(key.device)}]", "",
        f"ITL   P50 {np.percentile(itl, 50) * ms:7.1f} ms   P99 {np.percentile(itl, 99) * ms:7.1f}"
        f" ms   max {itl.max() * ms:7.1f} ms",
        f"TTFT  P50 {np.percentile(ttft, 50) * ms:7.1f} ms   P99 "
        f"{np.percentile(ttft, 99) * ms:7.1f} ms",
        "long prompts' TTFT: " + ", ".join(f"{t * ms:.0f}" for t in result.long_ttft) + " ms",
    ]
    longest = max(result.step_log, key=lambda s: s.duration_s)
    lines.append(f"{len(result.step_log)} steps; the longest ran {longest.num_tokens} token(s) "
                 f"({longest.num_prefill_tokens} prefill) in {longest.duration_s * ms:.0f} ms")
    ref_key = data.reference_key(key)
    if key.chunked and ref_key is not None and ref_key in data.runs:
        ref = data.runs[ref_key]
        lines.append(f"no chunking ({ref_key.budget}): ITL P99 "
                     f"{np.percentile(ref.itl, 99) * ms:.1f} ms, TTFT P50 "
                     f"{np.percentile(ref.ttft, 50) * ms:.1f} ms")
    return "\n".join(lines)


def chunk_dashboard_update(
    data: ChunkDashboardData, budget: int, threshold: int = 0,
    long_prompt_len: int | None = None, num_decodes: int | None = None,
    rate: float | None = None, chunked: bool = True, device: str | None = None,
    progress: Any = None,
) -> DashboardView:
    """One dashboard position, as plain data. A configuration the scheduler refuses (e.g.
    chunking off with a budget below the longest sequence, or a threshold above
    ``max_model_len``) gives ``DashboardView(error=<the scheduler's ValueError text>)``;
    a position whose row is not complete is measured now with the rest of its row (the sweep
    panel is never a lone point; ``progress(done, total)`` hears of each run) and cached."""
    try:  # the scheduler judges the values as given (the key stores them canonically)
        mixed_scheduler_config(data.workload(long_prompt_len, num_decodes, rate), budget,
                               threshold, chunked, data.max_model_len)
        key = data.key(budget, threshold, long_prompt_len, num_decodes, rate, chunked, device)
    except ValueError as e:
        return DashboardView("", None, str(e), "refused")
    source = ("precomputed" if key in data.pngs and all(k in data.runs for k in
                                                          data.row_keys(key)) else "measured now")
    if source == "measured now":
        data.complete_row(key, progress)
    png = data.png(key)
    result = data.runs[key]
    return DashboardView(dashboard_summary(data, key, result), png, None, source, result)


def chunk_dashboard(data: ChunkDashboardData | None = None, budget: int = 256,
                    threshold: int = 0, long_prompt_len: int | None = None,
                    num_decodes: int | None = None, rate: float | None = None,
                    chunked: bool = True, device: str | None = None) -> Any:
    """The chunk-size dashboard: sliders for the budget, the threshold, the long prompts'
    length, the number of short (decoding) requests and the arrival rate; a chunked-prefill
    toggle and a device/backend selector. Returns an ``ipywidgets.VBox``: the controls
    beside a text summary, then the picture. Sliders update on release; positions outside
    ``data``'s cache are measured on first visit (the text says "measuring")."""
    import ipywidgets as w

    data = data or ChunkDashboardData()
    wl = data.workload(long_prompt_len, num_decodes, rate)
    devices = available_devices()

    def choice(desc: str, options: Sequence[Any], value: Any) -> Any:
        options = sorted(set(options) | {value})
        return w.SelectionSlider(options=options, value=value, description=desc,
                                 continuous_update=False, style={"description_width": "150px"},
                                 layout=w.Layout(width="430px"))

    controls = {
        "budget": choice("token budget", DASH_BUDGETS, budget),
        "threshold": choice("long_prefill threshold", DASH_THRESHOLDS, threshold),
        "long_prompt_len": choice("long prompt length", DASH_LONG_LENS, wl.long_prompt_len),
        "num_decodes": choice("short requests", DASH_DECODES, wl.num_decodes),
        "rate": choice("arrivals (req/s)", DASH_RATES, wl.rate),
        "chunked": w.Checkbox(value=chunked, description="chunked prefill"),
        "device": w.Dropdown(options=devices, value=device or devices[0],
                             description="device · backend",
                             style={"description_width": "150px"}),
    }
    text = w.HTML(layout=w.Layout(flex="1 1 auto", margin="0 0 0 16px"))
    image = w.Image(format="png", layout=w.Layout(max_width="100%"))

    def render(_change: object = None) -> None:
        values = {k: c.value for k, c in controls.items()}
        def progress(done: int, total: int) -> None:
            text.value = (f"<i>measuring this row's budget sweep on the toy model: run {done} "
                          f"of {total} done (then every budget of the row is a lookup)...</i>")

        view = chunk_dashboard_update(data, **values, progress=progress)
        if view.error is not None:
            text.value = ("<b>The scheduler refuses this configuration:</b>"
                          "<pre style='color:#a00; white-space:pre-wrap; word-break:normal'>"
                          f"{html.escape(view.error)}</pre>")
            image.value = b""
            image.layout.display = "none"
            return
        note = "" if view.source == "precomputed" else " (its row measured just now, now cached)"
        text.value = (f"<pre style='font-size:11px'>{html.escape(view.text)}</pre>"
                      f"<i style='font-size:11px'>source: {view.source}{note}</i>")
        image.value = view.png  # type: ignore[assignment]
        image.layout.display = None

    for c in controls.values():
        c.observe(render, names="value")
    render()
    box = w.VBox(list(controls.values()), layout=w.Layout(flex="0 0 auto", min_width="440px"))
    return w.VBox([w.HBox([box, text]), image])


# ------------------------------------------------------------------ PNGs of figures


def figure_png(fig: Figure, dpi: int = 72) -> bytes:
    """PNG bytes of a figure, for an ``ipywidgets.Image`` (it shows without a kernel, on the
    web too). Plain ``savefig``; zlib level 1 halves the encoding time of the default level
    for a few % more bytes. Redraws stay fast because the figures are built for it: the
    trace panel redraws one figure in place, its cell numbers are stamped outlines
    (``viz.trace.CellNumbers``), and the dashboard's pictures are drawn once, ahead of time."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


SIM_PANEL_BUDGET = 2048
SIM_PANEL_QPS = 6.0  # a load at which prefill-first's stalls break the strict SLO


def simulation_view(cost_model: Any = None, budget: int = SIM_PANEL_BUDGET,
                    qps: float = SIM_PANEL_QPS, num_requests: int = 200,
                    seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """One view of ``simulation_panel``: the figure and the two ``SimResult``s (the same
    ShareGPT-like requests at ``qps``, chunked with ``budget`` and prefill-first)."""
    from chunkprefill.sim import CostModel, compare_policies, tbt_slo
    from chunkprefill.viz.sim import plot_simulation
    from chunkprefill.workload import sharegpt_like

    cm = cost_model or CostModel.preset()
    wl = sharegpt_like(num_requests, qps, seed=seed, max_model_len=cm.model.max_model_len)
    results = compare_policies(wl, cm, budget)
    return plot_simulation(results, cm, tbt_slo(cm),
                           f"{num_requests} ShareGPT-like requests at {qps:g} QPS"), results


def simulation_panel(cost_model: Any = None, num_requests: int = 200, seed: int = 0,
                     budget: int = SIM_PANEL_BUDGET, qps: float = SIM_PANEL_QPS) -> Any:
    """Sliders (token budget, QPS) over ``simulation_view`` (notebook 08). The default view
    is a load at which chunking matters; at low load there is little to stall and the two
    policies' P99 TBT meet."""
    import ipywidgets as widgets
    from IPython.display import display

    def show(budget: int, qps: float) -> None:
        display(simulation_view(cost_model, budget, qps, num_requests, seed)[0])

    return widgets.interactive(
        show,
        budget=widgets.SelectionSlider(options=[256, 512, 1024, 2048, 4096, 8192], value=budget,
                                       description="budget"),
        qps=widgets.FloatSlider(value=qps, min=0.25, max=8.0, step=0.25, description="QPS"),
    )
