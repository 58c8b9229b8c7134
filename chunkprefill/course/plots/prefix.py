"""Prefix caching meets chunked prefill: runs and pictures for notebook 09.

Every number comes from the real ``Scheduler`` driven by ``run_trace`` (no formula stands in
for it): ``shared_prompt_run`` lets a request with a system prompt run first and then sends a
longer prompt that starts with some of that system prompt, with prefix caching on or off, and
reports what the second prompt found in the cache, what it still computed, in how many chunks,
and how many steps its first token took. Figures are built without pyplot, as in ``viz``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from chunkprefill.course.scenarios import PrefixRun, shared_prompt_run
from chunkprefill.kv_cache import block_hashes_of

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
    for i in range(-(-len(token_ids) // block_size)):
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
    (blue, one shade per step), with the steps to its first token written at the end."""
    if ax is None:
        fig = Figure(figsize=(8.5, 0.55 * len(runs) + 1.2), layout="constrained")
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
        ax.text(x + run.prompt_len * 0.01, y, f"{len(run.chunks)} chunk(s), first token "
                f"after {run.first_token_steps} step(s)", va="center", fontsize=9)
    ax.set_yticks(range(len(runs)),
                  [f"{'on ' if r.enable_prefix_caching else 'off'} prefix={r.prefix_len} "
                   f"bs={r.block_size} budget={r.budget}" for r in reversed(runs)],
                  fontsize=8)
    ax.set_xlim(0, max(r.prompt_len for r in runs) * 1.7)
    ax.set_xlabel("P's prompt tokens (position)")
    ax.legend(handles=[Patch(facecolor=HIT, alpha=0.6, label="from the prefix cache"),
                       Patch(facecolor=COMPUTED, alpha=0.5, label="computed, one shade per "
                             "chunk (step)")], loc="lower left", bbox_to_anchor=(0, 1),
              ncol=2, fontsize=8, frameon=False)
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






