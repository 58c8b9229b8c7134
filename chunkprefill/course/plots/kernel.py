"""Pictures of the attention kernel's work (notebook 06): how one program's rows pack (query
token, query head) pairs, and which of them are padding the masks switch off."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from chunkprefill.i18n import tr

HEAD_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink",
               "tab:olive", "tab:cyan")
PADDED_HEAD = "0.55"  # the group's padded head (head_in_group >= GROUP)
PAST_CHUNK = "0.93"  # rows whose token lies past the sequence's query_len


def plot_query_tiles(programs: Sequence[tuple[str, int, int]], block_q: int, group: int,
                     group_padded: int, kv_head: int = 0) -> Figure:
    """One panel per program ``(name, q_len, q_tile)`` of KV head ``kv_head``: its ``BLOCK_M =
    block_q * group_padded`` rows drawn as a grid, a column per query token of the tile and a
    row per head in the group, each cell labelled with its row ``r`` (token ``q_tile * block_q
    + r // group_padded``, head ``kv_head * group + r % group_padded``). Real rows are coloured
    by query head; the padded head is grey (``head_in_group_mask``); rows past the chunk are
    pale (``q_in_seq_mask``)."""
    if not programs:
        raise ValueError("programs must name at least one (name, q_len, q_tile)")
    if group < 1 or group_padded < group or block_q < 1:
        raise ValueError(f"need block_q >= 1 and group_padded >= group >= 1, got block_q="
                         f"{block_q}, group={group}, group_padded={group_padded}")
    width = min(16.0, 0.42 * block_q * len(programs) + 1.5)
    fig = Figure(figsize=(width, 0.5 * group_padded + 1.9), layout="constrained")
    axes = fig.subplots(1, len(programs), squeeze=False)[0]
    for ax, (name, q_len, q_tile) in zip(axes, programs, strict=True):
        for r in range(block_q * group_padded):
            tok, h = q_tile * block_q + r // group_padded, r % group_padded
            real_tok, real_head = tok < q_len, h < group
            color = (HEAD_COLORS[(kv_head * group + h) % len(HEAD_COLORS)] if real_tok and real_head
                     else PADDED_HEAD if real_tok else PAST_CHUNK)
            x, y = r // group_padded, h
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=color, edgecolor="white", lw=1))
            ax.text(x + 0.5, y + 0.5, str(r), ha="center", va="center", fontsize=6,
                    color="white" if real_tok else "0.5")
        ax.set_xlim(0, block_q)
        ax.set_ylim(group_padded, 0)
        ax.set_xticks([i + 0.5 for i in range(block_q)],
                      [str(q_tile * block_q + i) for i in range(block_q)], fontsize=6)
        ax.set_yticks([h + 0.5 for h in range(group_padded)],
                      [str(kv_head * group + h) if h < group else tr("pad")
                       for h in range(group_padded)], fontsize=7)
        ax.set_xlabel(tr("query token of the chunk"), fontsize=8)
        ax.set_title(tr("{name}, q_tile {q_tile} ({q_len} query tokens)", name=name,
                        q_tile=q_tile, q_len=q_len), fontsize=9)
        ax.tick_params(length=0)
    axes[0].set_ylabel(tr("query head"), fontsize=8)
    handles = [Patch(color=HEAD_COLORS[(kv_head * group + h) % len(HEAD_COLORS)],
                     label=tr("query head {head}", head=kv_head * group + h)) for h in range(group)]
    handles += [Patch(color=PADDED_HEAD, label=tr("padded head: masked")),
                Patch(color=PAST_CHUNK, label=tr("past the chunk: masked"))]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=7,
               frameon=False)
    fig.suptitle(tr("One program's BLOCK_M = {block_q} x {group_padded} = {block_m} rows (kv_head "
                    "{kv_head}); the number in a cell is its row r", block_q=block_q,
                    group_padded=group_padded, block_m=block_q * group_padded, kv_head=kv_head),
                 fontsize=10)
    return fig
