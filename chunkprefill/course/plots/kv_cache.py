"""Pictures for the paged KV cache and the attention kernel.

Plotting functions return a ``matplotlib.figure.Figure`` built without pyplot (as in
``chunkprefill.course.plots``), so nothing leaks into pyplot's global state. What they draw
comes from ``chunkprefill.course.probes``, which only looks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from chunkprefill.course.plots.style import figure_and_axes
from chunkprefill.course.probes import PoolSnapshot, block_owners
from chunkprefill.i18n import tr

_PALETTE = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink",
            "tab:olive", "tab:cyan", "tab:red", "tab:gray"]


def request_colors(request_ids: Sequence[str]) -> dict[str, str]:
    """One colour per request, in order of first appearance (stable across figures)."""
    out: dict[str, str] = {}
    for rid in request_ids:
        if rid not in out:
            out[rid] = _PALETTE[len(out) % len(_PALETTE)]
    return out


# --------------------------------------------------------------------------- the pool


def plot_block_pool(snapshots: Sequence[PoolSnapshot], num_blocks: int, block_size: int,
                    ax: Axes | None = None) -> Figure:
    """The whole pool, step by step: column = step, row = physical block. A cell is coloured
    by the request that owns the block and labelled ``A1`` = request A's logical block 1;
    the dark part of a cell is how many of its ``block_size`` slots hold KV after the step."""
    n_steps = len(snapshots)
    fig, ax = figure_and_axes(ax, (min(16.0, 1.6 + 0.75 * n_steps), 1.3 + 0.36 * num_blocks))
    order = [rid for s in snapshots for rid in s.block_tables]
    colors = request_colors(order)
    for col, snap in enumerate(snapshots):
        for blk, owner in enumerate(block_owners(snap, num_blocks)):
            if owner is None:
                ax.add_patch(Rectangle((col, blk), 0.92, 0.88, facecolor="white",
                                       edgecolor="0.8", linewidth=0.8))
                continue
            rid, j = owner
            filled = min(block_size, max(0, snap.kv_lens[rid] - j * block_size))
            c = colors[rid]
            ax.add_patch(Rectangle((col, blk), 0.92, 0.88, facecolor=to_rgba(c, 0.25),
                                   edgecolor=c, linewidth=1.0))
            ax.add_patch(Rectangle((col, blk), 0.92 * filled / block_size, 0.88,
                                   facecolor=to_rgba(c, 0.75), linewidth=0))
            ax.text(col + 0.46, blk + 0.44, f"{rid}{j}", ha="center", va="center",
                    fontsize=8, color="black")
    ax.set_xlim(-0.1, n_steps)
    ax.set_ylim(num_blocks, -0.15)
    ax.set_xticks([i + 0.46 for i in range(n_steps)], [str(s.step) for s in snapshots])
    ax.set_yticks([b + 0.44 for b in range(num_blocks)], [str(b) for b in range(num_blocks)])
    ax.set_xlabel(tr("engine step"))
    ax.set_ylabel(tr("physical block id"))
    ax.set_title(tr("KV block pool ({num_blocks} blocks x {block_size} slots): who owns what, "
                    "step by step", num_blocks=num_blocks, block_size=block_size))
    handles = [Patch(facecolor=to_rgba(c, 0.75), edgecolor=c,
                     label=tr("request {rid}", rid=rid)) for rid, c in colors.items()]
    handles += [Patch(facecolor=to_rgba("0.5", 0.25), edgecolor="0.5",
                      label=tr("allocated, slots still empty")),
                Patch(facecolor="white", edgecolor="0.8", label=tr("free block"))]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False, title=tr("A1 = A's logical block 1"), title_fontsize=8)
    return fig


def plot_slot_mapping(snapshot: PoolSnapshot, num_blocks: int, block_size: int,
                      ax: Axes | None = None, request_ids: Sequence[str] | None = None,
                      ) -> Figure:
    """One step's flattened batch (left, in scheduling order: token = request + position p)
    and where each token's K/V goes (right: the cache as rows of blocks, columns of slots
    within a block). Arrows follow ``slot = block_table[p // block_size] * block_size +
    p % block_size``. Light cells hold KV written by earlier steps. ``request_ids``: every
    request of the run in order of first appearance, so each keeps the colour it has in
    ``plot_block_pool`` (default: the holders of this step only)."""
    tokens = [(rid, c + i, slot)
              for rid, c in snapshot.num_computed_tokens.items()
              for i, slot in enumerate(snapshot.slot_mapping[rid])]
    n_tok = len(tokens)
    height = max(n_tok, num_blocks)
    fig, ax = figure_and_axes(ax, (4.2 + 0.75 * block_size, 1.4 + 0.32 * height))
    colors = request_colors([*(request_ids or ()), *snapshot.block_tables])
    tok_h = height / max(n_tok, 1)
    blk_h = height / num_blocks
    x_grid = 4.0
    new_slots = {slot for _, _, slot in tokens}
    owners = block_owners(snapshot, num_blocks)
    for blk, owner in enumerate(owners):
        for off in range(block_size):
            slot = blk * block_size + off
            face, label = "white", ""
            if owner is not None:
                rid, j = owner
                p = j * block_size + off
                was_there = p < snapshot.kv_lens[rid] - snapshot.num_scheduled_tokens.get(rid, 0)
                if slot in new_slots:
                    face, label = to_rgba(colors[rid], 0.8), f"{rid} p={p}"
                elif was_there:
                    face, label = to_rgba(colors[rid], 0.22), f"{rid} p={p}"
            ax.add_patch(Rectangle((x_grid + off, blk * blk_h), 0.95, blk_h * 0.9,
                                   facecolor=face, edgecolor="0.6", linewidth=0.6))
            ax.text(x_grid + off + 0.06, blk * blk_h + 0.08 * blk_h, str(slot), fontsize=6,
                    color="0.35", va="top", ha="left")
            if label:
                ax.text(x_grid + off + 0.48, blk * blk_h + 0.5 * blk_h, label, fontsize=7,
                        ha="center", va="center")
        ax.text(x_grid - 0.1, blk * blk_h + 0.45 * blk_h, tr("block {blk}", blk=blk), fontsize=8,
                ha="right", va="center")
    for t, (rid, p, slot) in enumerate(tokens):
        y = t * tok_h
        ax.add_patch(Rectangle((0, y), 1.6, tok_h * 0.85, facecolor=to_rgba(colors[rid], 0.8),
                               edgecolor="0.3", linewidth=0.6))
        ax.text(0.8, y + 0.42 * tok_h, f"t={t}: {rid} p={p}", fontsize=7, ha="center",
                va="center")
        blk, off = divmod(slot, block_size)
        ax.add_patch(FancyArrowPatch((1.6, y + 0.42 * tok_h),
                                     (x_grid + off + 0.1, blk * blk_h + 0.45 * blk_h),
                                     arrowstyle="-|>", mutation_scale=7, linewidth=0.7,
                                     color=colors[rid], alpha=0.8))
    ax.set_xlim(-0.2, x_grid + block_size + 0.2)
    ax.set_ylim(height + 0.2, -0.8)
    ax.axis("off")
    ax.text(0.8, -0.45, tr("this step's tokens"), ha="center", fontsize=9, weight="bold")
    ax.text(x_grid + block_size / 2, -0.45, tr("paged KV cache (slot number in the corner)"),
            ha="center", fontsize=9, weight="bold")
    ax.set_title(tr("step {step}: slot_mapping sends token t's K/V to its cache slot",
                    step=snapshot.step))
    handles = [Patch(facecolor=to_rgba(colors[r], 0.8), label=tr("{rid}: written this step", rid=r))
               for r in snapshot.num_scheduled_tokens]
    handles.append(Patch(facecolor=to_rgba("0.5", 0.22), label=tr("written by earlier steps")))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, -0.02 - 0.6 / height),
              ncol=len(handles), fontsize=7, frameon=False)
    return fig


# --------------------------------------------------------------------------- probes


def plot_chunk_work(query_tokens: Sequence[int], kv_read: Sequence[int],
                    title: str = "") -> Figure:
    """Left: per prefill chunk, the K/V positions its attention loads (``seq_len``), split into
    the context cached by earlier chunks and the chunk's own new tokens (the only ones
    computed). Right: cumulative tokens run through the model, against the road not taken,
    where each chunk would recompute its whole prefix. The two 192s of a 45-token prompt in
    chunks of 7 are the same sum but not the same work: loading a cached K/V position is a
    few hundred bytes per layer, computing a token is about two multiply-adds per weight."""
    q = np.asarray(query_tokens)
    kv = np.asarray(kv_read)
    k = np.arange(len(q))
    fig = Figure(figsize=(11.0, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1.15, 1.0])
    left.bar(k, kv - q, color="tab:blue", alpha=0.45,
             label=tr("loaded from the cache (earlier chunks' K/V)"))
    left.bar(k, q, bottom=kv - q, color="tab:orange",
             label=tr("computed in this chunk (queries; K/V written)"))
    for x, total in zip(k, kv, strict=True):
        left.text(x, total + 0.6, f"seq_len={total}", ha="center", fontsize=7)
    left.set_xlabel(tr("prefill chunk (engine step)"))
    left.set_ylabel(tr("K/V positions loaded (seq_len)"))
    left.set_title(tr("Per chunk: queries stay small, the K/V loaded grows"))
    left.set_ylim(0, kv.max() * 1.18)
    left.legend(loc="upper left", fontsize=8, frameon=False)
    right.plot(k, np.cumsum(q), color="tab:green", marker="o",
               label=tr("paged cache: {n} tokens in total", n=int(q.sum())))
    right.plot(k, np.cumsum(kv), color="tab:red", marker="s", linestyle=":",
               label=tr("if each chunk recomputed its prefix: {n}", n=int(kv.sum())))
    right.set_xlabel(tr("prefill chunk (engine step)"))
    right.set_ylabel(tr("tokens run through the model (cumulative)"))
    right.set_title(tr("Tokens through the model: each prompt token once"))
    right.legend(loc="upper left", fontsize=8, frameon=False)
    fig.suptitle(title or tr("Chunked prefill over the paged KV cache"))
    return fig


# --------------------------------------------------------------------------- kernels


def causal_masks(query_lens: Sequence[int], seq_lens: Sequence[int]) -> list[np.ndarray]:
    """Per sequence, the (query_len, seq_len) boolean mask the kernel applies: query i sits
    at absolute position ``seq_len - query_len + i`` and sees keys up to that position."""
    out = []
    for q, L in zip(query_lens, seq_lens, strict=True):
        q_abs = (L - q) + np.arange(q)
        out.append(np.arange(L)[None, :] <= q_abs[:, None])
    return out


def plot_causal_masks(query_lens: Sequence[int], seq_lens: Sequence[int],
                      names: Sequence[str] | None = None) -> Figure:
    """The flattened batch as the kernel sees it: one row per query token (sequences one
    after the other, as ``query_start_loc`` orders them), one column per key position. Each
    row shows which keys of *its own* sequence it may see: cached by earlier steps, written
    this step, masked (a future key), or past the end of that sequence's KV."""
    from matplotlib.colors import ListedColormap

    names = list(names) if names is not None else [f"seq {b}" for b in range(len(seq_lens))]
    masks = causal_masks(query_lens, seq_lens)
    width = max(seq_lens)
    rows, labels = [], []
    for m, q, L, name in zip(masks, query_lens, seq_lens, names, strict=True):
        for i in range(q):
            row = np.full(width, 3)  # no such key in this sequence
            row[:L] = np.where(m[i], 2, 0)
            row[: L - q] = np.where(m[i, : L - q], 1, 0)
            rows.append(row)
            labels.append(f"{name} q{i}")
    img = np.stack(rows)
    n_rows = img.shape[0]
    fig, ax = figure_and_axes(None, (min(16.0, 4.0 + 0.22 * width), 1.3 + 0.22 * n_rows))
    cmap = ListedColormap(["white", "#9ecae1", "#08519c", "0.88"])
    ax.imshow(img, cmap=cmap, vmin=0, vmax=3, aspect="equal", interpolation="nearest")
    ax.set_xticks(np.arange(-0.5, width, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, n_rows, 1), minor=True)
    ax.grid(which="minor", color="0.75", linewidth=0.3)
    ax.tick_params(which="minor", length=0)
    ax.set_xticks(range(0, width, 2))
    ax.set_yticks(range(n_rows), labels, fontsize=7)
    start = 0
    for q, L in zip(query_lens, seq_lens, strict=True):
        ax.plot([L - q - 0.5, L - q - 0.5], [start - 0.5, start + q - 0.5], color="tab:red",
                linewidth=1.8)
        start += q
        ax.axhline(start - 0.5, color="black", linewidth=1.0)
    ax.set_xlabel(tr("key position in the row's own sequence"))
    ax.set_ylabel(tr("query row of the flattened batch"))
    ax.set_title(tr("Causal mask aligned to the end of each sequence's KV:\n"
                    "query i of a sequence sees keys 0 .. context_len + i"), fontsize=10)
    handles = [Patch(facecolor="#9ecae1", edgecolor="0.6", label="visible, cached earlier"),
               Patch(facecolor="#08519c", edgecolor="0.6", label="visible, written this step"),
               Patch(facecolor="white", edgecolor="0.6", label="masked: a future key"),
               Patch(facecolor="0.88", edgecolor="0.6", label="past seq_len: no such key"),
               Line2D([0], [0], color="tab:red", label="context_len = seq_len - query_len")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    return fig




