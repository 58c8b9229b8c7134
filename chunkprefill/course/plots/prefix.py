"""Prefix caching meets chunked prefill: pictures.

Every number comes from the real ``Scheduler`` driven by ``run_trace`` (no formula stands in
for it): ``shared_prompt_run`` lets a request with a system prompt run first and then sends a
longer prompt that starts with some of that system prompt, with prefix caching on or off, and
reports what the second prompt found in the cache, what it still computed, in how many chunks,
and how many steps its first token took. Figures are built without pyplot, as every course plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from chunkprefill.checks import cdiv
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.scenarios import PrefixRun, shared_prompt_run
from chunkprefill.i18n import tr
from chunkprefill.kv_cache import block_hashes_of
from chunkprefill.scheduler import Scheduler, SchedulerOutput
from chunkprefill.trace import TraceRequest, TraceStep, run_trace

HIT, COMPUTED, NO_HASH = "tab:green", "tab:blue", "0.85"


# ------------------------------------------------------------------------- the hash chain
@dataclass(frozen=True)
class BlockView:
    """One block of a prompt: its tokens, its hash (None: partial, not cached) and whether
    the request found it in the cache."""

    index: int
    token_ids: tuple[int, ...]
    block_hash: str | None  # first hex digits
    hit: bool


def prompt_blocks(token_ids: Sequence[int], block_size: int, num_cached_tokens: int = 0,
                  digits: int = 6) -> list[BlockView]:
    """The prompt cut into blocks, each full block with its chained hash."""
    hashes = block_hashes_of(list(token_ids), block_size)
    out = []
    for i in range(cdiv(len(token_ids), block_size)):
        toks = tuple(token_ids[i * block_size:(i + 1) * block_size])
        h = hashes[i].hex()[:digits] if i < len(hashes) else None
        out.append(BlockView(i, toks, h, (i + 1) * block_size <= num_cached_tokens))
    return out


def plot_hash_chain(prompts: dict[str, Sequence[int]], block_size: int,
                    num_cached_tokens: dict[str, int] | None = None,
                    ax: Axes | None = None) -> Figure:
    """One row of blocks per request; each full block shows its tokens and its hash, with an
    arrow from the parent block whose hash it chains. Green: found in the cache (hit);
    blue: computed; grey: a partial block (no hash, never cached)."""
    cached = num_cached_tokens or {}
    rows = {rid: prompt_blocks(ids, block_size, cached.get(rid, 0))
            for rid, ids in prompts.items()}
    width = max(len(b) for b in rows.values())
    if ax is None:
        fig = Figure(figsize=(1.35 * width + 1.2, 1.3 * len(rows) + 0.6), layout="constrained")
        ax = fig.add_subplot()
    fig = ax.figure
    for r, (rid, blocks) in enumerate(rows.items()):
        y = -1.4 * r
        ax.text(-0.25, y + 0.4, rid, ha="right", va="center", fontsize=11, weight="bold")
        for b in blocks:
            color = NO_HASH if b.block_hash is None else (HIT if b.hit else COMPUTED)
            ax.add_patch(Rectangle((b.index * 1.3, y), 1.0, 0.8, facecolor=color, alpha=0.35,
                                   edgecolor="black"))
            toks = ",".join(map(str, b.token_ids))
            if len(toks) > 14:
                toks = toks[:12] + "…"
            ax.text(b.index * 1.3 + 0.5, y + 0.55, toks, ha="center", fontsize=7)
            ax.text(b.index * 1.3 + 0.5, y + 0.2, b.block_hash or "no hash", ha="center",
                    fontsize=8, family="monospace")
            if b.index and b.block_hash is not None:
                ax.add_patch(FancyArrowPatch((b.index * 1.3 - 0.3, y + 0.2),
                                             (b.index * 1.3, y + 0.2), arrowstyle="->",
                                             mutation_scale=9))
    ax.set_xlim(-0.9, width * 1.3)
    ax.set_ylim(-1.4 * (len(rows) - 1) - 0.3, 1.1)
    ax.axis("off")
    ax.legend(handles=[Patch(facecolor=c, alpha=0.35, edgecolor="black", label=lab)
                       for c, lab in ((HIT, "hit: KV reused"), (COMPUTED, "computed"),
                                      (NO_HASH, "partial block: no hash"))],
              loc="upper right", ncol=3, fontsize=8, frameon=False)
    return fig  # type: ignore[return-value]


def plot_prefix_chunks(runs: Sequence[PrefixRun], ax: Axes | None = None) -> Figure:
    """One bar per run: P's prompt as the cached part (green), then each chunk it computed
    (blue, one shade per step); each row's label says the setting, the chunks and the steps
    to its first token, so the axis is only as wide as the prompt."""
    if ax is None:
        fig = Figure(figsize=(8.5, 0.65 * len(runs) + 1.2), layout="constrained")
        ax = fig.add_subplot()
    fig = ax.figure
    for i, run in enumerate(runs):
        y = len(runs) - 1 - i
        ax.barh(y, run.num_cached_tokens, color=HIT, alpha=0.6, edgecolor="black")
        x = run.num_cached_tokens
        for k, n in enumerate(run.chunks):
            ax.barh(y, n, left=x, color=COMPUTED, alpha=0.35 + 0.4 * (k % 2),
                    edgecolor="black")
            x += n
    ax.set_yticks(range(len(runs)), [_run_label(r) for r in reversed(runs)], fontsize=8)
    ax.set_xlim(0, max(r.prompt_len for r in runs))
    ax.set_xlabel(tr("P's prompt tokens (position)"))
    ax.legend(handles=[Patch(facecolor=HIT, alpha=0.6, label=tr("from the prefix cache")),
                       Patch(facecolor=COMPUTED, alpha=0.5,
                             label=tr("computed, one shade per chunk (step)"))],
              loc="lower left", bbox_to_anchor=(0, 1), ncol=2, fontsize=8, frameon=False)
    return fig  # type: ignore[return-value]


def _run_label(run: PrefixRun) -> str:
    if run.enable_prefix_caching:
        return tr("caching on, block {bs}, budget {budget}:\n{n} chunk(s), first token after "
                  "{steps} step(s)", bs=run.block_size, budget=run.budget, n=len(run.chunks),
                  steps=run.first_token_steps)
    return tr("caching off, block {bs}, budget {budget}:\n{n} chunk(s), first token after "
              "{steps} step(s)", bs=run.block_size, budget=run.budget, n=len(run.chunks),
              steps=run.first_token_steps)


# ----------------------------------------------------------------------- the free queue
@dataclass(frozen=True)
class PoolState:
    """The block pool right after one ``schedule()`` call: every request's block table, and
    the free queue front first (the next block an allocation takes), each free block as
    ``(block id, label, has a hash)``; the label names the last request block that held it
    (``"A2"``: A's block 2), empty for a block never used."""

    block_tables: dict[str, tuple[int, ...]]
    free_queue: tuple[tuple[int, str, bool], ...]


def trace_with_pool(requests: Sequence[TraceRequest], scheduler_config: SchedulerConfig,
                    cache_config: CacheConfig) -> tuple[list[TraceStep], list[PoolState]]:
    """``run_trace`` with the block pool read after every step (one ``PoolState`` per step):
    what the free queue held, and who holds which block."""
    states: list[PoolState] = []
    owner: dict[int, str] = {}

    class _Watched(Scheduler):
        def schedule(self) -> SchedulerOutput:
            out = super().schedule()
            kv = self.kv_cache_manager
            tables = {rid: tuple(t) for rid, t in kv.block_tables.items()}
            for rid, table in tables.items():
                for i, b in enumerate(table):
                    owner[b] = f"{rid}{i}"
            pool = kv.block_pool
            states.append(PoolState(tables, tuple(
                (b, owner.get(b, ""), pool.block_hash[b] is not None)
                for b in pool.free_block_ids())))
            return out

    steps = run_trace(requests, scheduler_config, cache_config, scheduler_cls=_Watched)
    return steps, states


def plot_free_queue(queues: dict[str, Sequence[tuple[int, str, bool]]], taken: int,
                    taker: str, ax: Axes | None = None) -> Figure:
    """One row per free queue (front on the left): each block a box with the request block
    it last held; green if it keeps its hash (a later request can hit it), grey if freed
    without one, white if never used. The first ``taken`` boxes of each row, the blocks
    ``taker``'s allocation takes (evicting their hashes), are hatched in red."""
    width = max(len(q) for q in queues.values())
    if ax is None:
        fig = Figure(figsize=(0.62 * width + 2.2, 0.75 * len(queues) + 1.1),
                     layout="constrained")
        ax = fig.add_subplot()
    fig = ax.figure
    for r, (label, queue) in enumerate(queues.items()):
        y = -r
        ax.text(-0.3, y + 0.35, label, ha="right", va="center", fontsize=9)
        for i, (_, who, hashed) in enumerate(queue):
            color = HIT if hashed else (NO_HASH if who else "white")
            ax.add_patch(Rectangle((i, y), 0.9, 0.7, facecolor=color, alpha=0.5 if hashed else 1,
                                   edgecolor="tab:red" if i < taken else "black",
                                   hatch="///" if i < taken else None,
                                   linewidth=1.6 if i < taken else 0.8))
            ax.text(i + 0.45, y + 0.35, who, ha="center", va="center",
                    fontsize=8, weight="bold" if hashed else "normal")
    ax.annotate("", xy=(-0.05, 0.95), xytext=(2.5, 0.95),
                arrowprops={"arrowstyle": "->", "color": "0.3"})
    ax.text(2.6, 0.95, tr("front of the free queue: taken first"), va="center", fontsize=8,
            color="0.3")
    ax.set_xlim(-2.2, width)
    ax.set_ylim(-len(queues) + 0.8, 1.25)
    ax.axis("off")
    ax.legend(handles=[Patch(facecolor=HIT, alpha=0.5, edgecolor="black",
                             label=tr("keeps its hash (can be hit)")),
                       Patch(facecolor=NO_HASH, edgecolor="black",
                             label=tr("freed, no hash (partial block)")),
                       Patch(facecolor="white", edgecolor="black", label=tr("never used")),
                       Patch(facecolor="white", edgecolor="tab:red", hatch="///",
                             label=tr("taken by {taker} (a cached block loses its hash)",
                                      taker=taker))],
              loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=8,
              frameon=False)
    return fig  # type: ignore[return-value]


def plot_hit_staircase(prompt_len: int, block_sizes: Sequence[int], budget: int = 32,
                       ax: Axes | None = None) -> Figure:
    """Tokens P finds in the cache against the tokens it shares (one line per block size),
    from a ``shared_prompt_run`` per point: whole blocks only (a staircase), and at the right
    edge, where the whole prompt is shared, the ``num_tokens - 1`` cap drops a whole block."""
    if ax is None:
        fig = Figure(figsize=(7.5, 3.6), layout="constrained")
        ax = fig.add_subplot()
    fig = ax.figure
    xs = list(range(1, prompt_len + 1))
    ax.plot(xs, xs, color="0.6", ls=":", label="shared tokens (upper bound)")
    for bs in block_sizes:
        hits = [shared_prompt_run(x, bs, budget, prompt_len).num_cached_tokens for x in xs]
        line, = ax.step(xs, hits, where="post", label=f"hit, block_size={bs}")
        if prompt_len % bs == 0:  # the whole prompt is whole blocks: the cap costs one
            ax.plot([prompt_len], [prompt_len], "o", mfc="none", color=line.get_color())
            ax.annotate(f"cap num_tokens-1: {prompt_len - hits[-1]} recomputed",
                        (prompt_len, hits[-1]), xytext=(-150, -30 - 12 * len(ax.texts)),
                        textcoords="offset points", fontsize=8, color=line.get_color(),
                        arrowprops={"arrowstyle": "->", "color": line.get_color()})
    ax.set_xlabel("prefix P shares with the cached prompt (tokens)")
    ax.set_ylabel("tokens served from the cache")
    ax.legend(fontsize=8)
    return fig  # type: ignore[return-value]
