"""``python -m dev.i18n COMMAND`` (the Makefile's ``make i18n`` and ``make zh-TW``).

- ``update``: extract the English (markdown segments of the edition notebooks; ``tr``/``N_``
  literals of the package and of those notebooks' code), msgmerge into the catalogs (changed
  English becomes fuzzy, its old text kept as ``#| msgid``), compile the runtime JSON.
- ``add NOTEBOOK``: start the catalog of one more English notebook, then ``update``.
- ``build [--force] [--no-run]``: render ``notebooks/<lang>/``; execute the notebooks whose code,
  runtime catalog or English numbers changed (``--force``: all; ``--no-run``: report only).
- ``check``: every check the tests run, printed (for a translator's loop)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .catalog import Layout, update_all

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dev.i18n")
    parser.add_argument("--language", default="zh-TW")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("update")
    add = sub.add_parser("add")
    add.add_argument("notebook", type=Path)
    build = sub.add_parser("build")
    build.add_argument("--force", action="store_true")
    build.add_argument("--no-run", action="store_true")
    build.add_argument("only", nargs="*", help="notebooks to build (file names or numbers, 06)")
    sub.add_parser("check")
    args = parser.parse_args(argv)
    layout = Layout(ROOT, args.language)
    if args.command == "add":
        english = (ROOT / args.notebook).resolve()
        if english.parent != layout.english or english.suffix != ".ipynb":
            parser.error(f"notebook must be an English notebook in {layout.rel(layout.english)}/")
        layout.catalog_for(english).parent.mkdir(parents=True, exist_ok=True)
        layout.catalog_for(english).touch()
    if args.command in ("update", "add"):
        print("\n".join(update_all(layout)))
    elif args.command == "build":
        from .notebook import build as build_edition
        print("\n".join(build_edition(layout, run=not args.no_run, force=args.force,
                                       only=args.only)))
    elif args.command == "check":
        from .report import all_problems
        problems = all_problems(layout)
        print("\n".join(problems) or "all i18n checks pass")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
