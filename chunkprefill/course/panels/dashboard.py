"""Interactive panels, PythonDataScienceHandbook style: a plain function computes and renders
(tests call it), and a thin ipywidgets wrapper only wires sliders to it. ipywidgets is
imported inside the wrappers, so importing this module stays light."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from chunkprefill.config import SchedulerConfig
from chunkprefill.course.panels.common import figure_png
from chunkprefill.course.plots.measured import plot_chunk_dashboard
from chunkprefill.i18n import N_, tr
from chunkprefill.lab.progress import Progress
from chunkprefill.lab.serving import (
    BudgetPoint,
    MixedResult,
    MixedWorkload,
    run_mixed,
)
from chunkprefill.timing import clock_label

# ---------------------------------------------------------------------- chunk-size dashboard
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


_DISPLAY_NAMES = {"cpu": "CPU", "cuda": "CUDA", "torch": "PyTorch", "triton": "Triton"}


def device_title(device_label: str) -> str:
    """The device and backend as a reader reads them (``"cpu · torch"`` -> ``"CPU ·
    PyTorch"``): names, not identifiers, so a title needs no translation."""
    device, backend = _parse_device(device_label)
    return f"{_DISPLAY_NAMES[device]} · {_DISPLAY_NAMES[backend]}"


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
        return self.workload_of(key).scheduler_config(key.budget, key.threshold,
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
                run_mixed(model, wl, wl.scheduler_config(64), attention_backend=backend,
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
        the no-chunking baseline among them), drawing every position's picture. The progress
        report (``lab.progress``) is one line in a stored notebook. Returns the keys."""
        self.budgets = tuple(budgets)
        keys = [self.key(b, t, long_prompt_len, num_decodes, rate, True, device)
                for t in thresholds for b in budgets]
        need = self.workload(long_prompt_len, num_decodes, rate).max_seq_len
        keys += [self.key(b, 0, long_prompt_len, num_decodes, rate, False, device)
                 for b in budgets if b >= need]
        ref = self.reference_key(keys[0]) if keys else None
        keys = list(dict.fromkeys([*keys, *([ref] if ref else [])]))
        todo = [k for k in keys if k not in self.runs]
        bar = Progress(len(todo)) if progress else None
        for k in todo:
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
        title = tr("{label}, threshold {threshold} | {num_decodes} short + {num_long} long "
                   "({long_prompt_len}-token) prompts at {rate:g} req/s | {device} [{clock}]",
                   label=_short_label(key), threshold=key.threshold,
                   num_decodes=wl.num_decodes, num_long=wl.num_long,
                   long_prompt_len=wl.long_prompt_len, rate=wl.rate,
                   device=device_title(key.device),
                   clock=timing_label(key.device))
        return plot_chunk_dashboard(result.metrics, result.long_ids, self.sweep_points(key),
                                    key.budget if key.chunked else None, itl, ttft, title)

    def png(self, key: DashboardKey) -> bytes:
        if key not in self.pngs:
            self.pngs[key] = figure_png(self.figure(key))
        return self.pngs[key]


# What the panel says of a view's ``DashboardView.source`` (a refused one shows its error).
SOURCE_NOTES = {"precomputed": N_("source: precomputed"),
                "measured now": N_("source: measured now (its row measured just now, now cached)")}


def _short_label(key: DashboardKey) -> str:
    return (tr("budget {budget}", budget=key.budget) if key.chunked
            else tr("no chunking ({budget})", budget=key.budget))


def dashboard_summary(data: ChunkDashboardData, key: DashboardKey, result: MixedResult) -> str:
    """The text beside the picture: the percentiles, the long prompts' TTFT, the step that
    took longest, and against the no-chunking baseline if it is measured."""
    wl = data.workload_of(key)
    ms = 1e3
    itl, ttft = result.itl, result.ttft
    setting = {"budget": key.budget, "threshold": key.threshold}
    lines = [
        tr("chunked prefill, budget {budget}, long_prefill_token_threshold {threshold}",
           **setting) if key.chunked else
        tr("chunking OFF, budget {budget}, long_prefill_token_threshold {threshold}", **setting),
        tr("{num_decodes} short requests + {num_long} long prompts of {long_prompt_len} tokens,",
           num_decodes=wl.num_decodes, num_long=wl.num_long, long_prompt_len=wl.long_prompt_len),
        tr("Poisson arrivals at {rate:g} req/s on the nominal clock", rate=wl.rate),
        f"{device_title(key.device)} [{timing_label(key.device)}]", "",
        tr("ITL   P50 {p50_ms:7.1f} ms   P99 {p99_ms:7.1f} ms   max {max_ms:7.1f} ms",
           p50_ms=np.percentile(itl, 50) * ms, p99_ms=np.percentile(itl, 99) * ms,
           max_ms=itl.max() * ms),
        f"TTFT  P50 {np.percentile(ttft, 50) * ms:7.1f} ms   P99 "
        f"{np.percentile(ttft, 99) * ms:7.1f} ms",
        tr("long prompts' TTFT: {ttfts} ms",
           ttfts=", ".join(f"{t * ms:.0f}" for t in result.long_ttft)),
    ]
    longest = max(result.step_log, key=lambda s: s.duration_s)
    lines.append(tr("{num_steps} steps; the longest ran {num_tokens} token(s) ({num_prefill} "
                    "prefill) in {step_ms:.0f} ms", num_steps=len(result.step_log),
                    num_tokens=longest.num_tokens, num_prefill=longest.num_prefill_tokens,
                    step_ms=longest.duration_s * ms))
    ref_key = data.reference_key(key)
    if key.chunked and ref_key is not None and ref_key in data.runs:
        ref = data.runs[ref_key]
        lines.append(tr("no chunking ({budget}): ITL P99 {p99_ms:.1f} ms, TTFT P50 "
                        "{ttft_ms:.1f} ms", budget=ref_key.budget,
                        p99_ms=np.percentile(ref.itl, 99) * ms,
                        ttft_ms=np.percentile(ref.ttft, 50) * ms))
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
        data.workload(long_prompt_len, num_decodes, rate).scheduler_config(budget,
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
        "budget": choice(tr("token budget"), DASH_BUDGETS, budget),
        "threshold": choice(tr("long_prefill threshold"), DASH_THRESHOLDS, threshold),
        "long_prompt_len": choice(tr("long prompt length"), DASH_LONG_LENS, wl.long_prompt_len),
        "num_decodes": choice(tr("short requests"), DASH_DECODES, wl.num_decodes),
        "rate": choice(tr("arrivals (req/s)"), DASH_RATES, wl.rate),
        "chunked": w.Checkbox(value=chunked, description=tr("chunked prefill")),
        "device": w.Dropdown(options=devices, value=device or devices[0],
                             description=tr("device · backend"),
                             style={"description_width": "150px"}),
    }
    text = w.HTML(layout=w.Layout(flex="1 1 auto", margin="0 0 0 16px"))
    image = w.Image(format="png", layout=w.Layout(max_width="100%"))

    def render(_change: object = None) -> None:
        values = {k: c.value for k, c in controls.items()}
        def progress(done: int, total: int) -> None:
            text.value = ("<i>" + tr("measuring this row's budget sweep on the toy model: run "
                                     "{done} of {total} done (then every budget of the row is "
                                     "a lookup)...", done=done, total=total) + "</i>")

        view = chunk_dashboard_update(data, **values, progress=progress)
        if view.error is not None:
            text.value = ("<b>" + tr("The scheduler refuses this configuration:") + "</b>"
                          "<pre style='color:#a00; white-space:pre-wrap; word-break:normal'>"
                          f"{html.escape(view.error)}</pre>")
            image.value = b""
            image.layout.display = "none"
            return
        text.value = (f"<pre style='font-size:11px'>{html.escape(view.text)}</pre>"
                      f"<i style='font-size:11px'>{tr(SOURCE_NOTES[view.source])}</i>")
        image.value = view.png  # type: ignore[assignment]
        image.layout.display = None

    for c in controls.values():
        c.observe(render, names="value")
    render()
    box = w.VBox(list(controls.values()), layout=w.Layout(flex="0 0 auto", min_width="440px"))
    return w.VBox([w.HBox([box, text]), image])


# ------------------------------------------------------------------ PNGs of figures
