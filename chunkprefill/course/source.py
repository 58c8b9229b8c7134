"""Short excerpts of the package's own source, for notebooks that show the rule the reader should
read. Each cut is found by the text a line starts with, so a notebook fails loudly (a
``ValueError`` naming the anchor) if the code it reads has changed shape."""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def source_sections(obj: Callable[..., Any] | Any, anchors: Sequence[str]) -> list[str]:
    """The source of ``obj`` cut into pieces to read one at a time: a new piece starts at the
    first line (after the previous cut) that begins with each anchor in turn, together with
    the comment lines just above it. A ``triton.jit`` kernel is unwrapped to its Python
    function first. Raises ``ValueError`` naming an anchor that is not found, so a notebook
    fails loudly if the code it reads has changed shape."""
    fn = getattr(obj, "fn", obj)
    lines = inspect.getsource(fn).splitlines()
    cuts = [0]
    for anchor in anchors:
        at = next((i for i in range(cuts[-1] + 1, len(lines))
                   if lines[i].strip().startswith(anchor)), None)
        if at is None:
            raise ValueError(f"no line starting with {anchor!r} after line {cuts[-1]} of "
                             f"{getattr(fn, '__qualname__', fn)}")
        while at - 1 > cuts[-1] and lines[at - 1].strip().startswith("#"):
            at -= 1  # keep a section's leading comment with it
        cuts.append(at)
    cuts.append(len(lines))
    return ["\n".join(lines[a:b]).rstrip() for a, b in zip(cuts, cuts[1:], strict=False)]


def our_lines(obj: object, first: str, last: str | None = None) -> str:
    """The lines of ``obj``'s source from the first one that starts (after indentation) with
    ``first`` through the next one starting with ``last`` (just that line if ``last`` is
    None), each with its line number in our file: the lines to read beside a vLLM excerpt.
    A ``ValueError`` names an anchor that is not found, so a notebook fails loudly if the
    code it quotes changes shape."""
    lines, start = inspect.getsourcelines(obj)  # type: ignore[arg-type]
    stripped = [line.strip() for line in lines]
    try:
        a = next(i for i, t in enumerate(stripped) if t.startswith(first))
        b = a if last is None else next(i for i in range(a, len(lines))
                                        if stripped[i].startswith(last))
    except StopIteration:
        raise ValueError(f"first/last must start lines of {getattr(obj, '__qualname__', obj)}; "
                         f"not found: {first!r} .. {last!r}") from None
    path = Path(inspect.getsourcefile(obj) or "?")  # type: ignore[arg-type]
    head = f"# {path.parent.name}/{path.name}, lines {start + a}-{start + b} (ours)"
    body = textwrap.dedent("".join(lines[a:b + 1])).splitlines()
    return "\n".join([head, *(f"{start + a + i:>4}  {line}" for i, line in enumerate(body))])
