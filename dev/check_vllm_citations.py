"""Check every vLLM source excerpt the notebooks quote against vLLM's own files.

A notebook quotes vLLM as a markdown link to ``.../blob/v0.33.0/<path>#La-Lb`` followed (in the
same cell) by a fenced code block. This script reads ``<path>`` under a vLLM 0.33.0 install or
checkout and requires that the block's non-blank lines, stripped of indentation, appear in order
within lines ``a..b`` (a link with no code block after it only has to point inside the file).
vLLM is not a dependency, so this runs by hand, e.g.::

    python dev/check_vllm_citations.py /path/to/site-packages  # the dir holding vllm/
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

LINK = re.compile(r"blob/v0\.33\.0/(vllm/[\w/]+\.py)#L(\d+)(?:-L(\d+))?\)")
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def check(root: Path, notebooks: list[Path]) -> list[str]:
    errors, checked = [], 0
    for nb_path in notebooks:
        for cell in json.loads(nb_path.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            text = "".join(cell["source"])
            for m in LINK.finditer(text):
                path, a = m.group(1), int(m.group(2))
                b = int(m.group(3) or a)
                lines = (root / path).read_text().splitlines()
                where = f"{nb_path.name}: {path}#L{a}-L{b}"
                if b > len(lines):
                    errors.append(f"{where}: the file has {len(lines)} lines")
                    continue
                block = BLOCK.search(text, m.end())
                nxt = LINK.search(text, m.end())
                checked += 1
                if block is None or (nxt is not None and nxt.start() < block.start()):
                    continue
                want = [ln.strip() for ln in block.group(1).splitlines() if ln.strip()]
                have = [ln.strip() for ln in lines[a - 1:b] if ln.strip()]
                if want != have:
                    errors.append(f"{where}: quoted {want} but the file has {have}")
    print(f"{checked} citations checked")
    return errors


if __name__ == "__main__":
    root = Path(sys.argv[1])
    nbs = sorted(Path(__file__).resolve().parent.parent.glob("notebooks/*.ipynb"))
    problems = check(root, nbs)
    print("\n".join(problems) or "every quoted excerpt matches its lines")
    sys.exit(1 if problems else 0)
