"""Build the course website into one folder (``make site``), offline, from the notebooks'
stored outputs: nothing is executed. Sphinx + myst-nb + sphinx-book-theme render each
edition (site/editions.toml) from a staged copy of its sources; everything a page loads is
vendored from pinned npm packages (site/vendor.toml); the live trace page runs the package's
own scheduler in Pyodide from a wheel of this checkout (``pip wheel --no-deps .``).

    python site/build.py [--out build/site]

Staging (under build/site-work/) keeps the checkout clean and lets one build serve any
layout: notebooks are found by glob, the API reference by walking the package's files, and
links between notebooks, pages and package files are rewritten to where they land."""

from __future__ import annotations

import argparse
import ast
import base64
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
PACKAGE = "chunkprefill"
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
ARCHITECTURE = Path("docs/architecture.md")  # the lead's page; included when it exists
STATED_TIME = re.compile(r"(\d+)(?:\s*(?:–|-|to|至)\s*(\d+))?\s*(?:min(?:ute)?s?\b|分鐘)", re.I)
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")


def sh(*cmd: str | Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


# ------------------------------------------------------------------ vendored npm packages

def npm_integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def npm_tarball(name: str, version: str, integrity: str, cache: Path) -> Path:
    """``npm pack NAME@VERSION`` into ``cache`` (once), checked against ``integrity``."""
    cache.mkdir(parents=True, exist_ok=True)
    dest = cache / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not dest.exists() or npm_integrity(dest) != integrity:
        if shutil.which("npm") is None:
            raise SystemExit("npm not found: `make site` vendors the pages' scripts from npm "
                             "(Debian: apt-get install npm)")
        with tempfile.TemporaryDirectory() as tmp:
            out = sh("npm", "pack", f"{name}@{version}", "--json", "--pack-destination", tmp,
                     capture_output=True, text=True).stdout
            shutil.move(Path(tmp) / json.loads(out)[0]["filename"], dest)
    got = npm_integrity(dest)
    if got != integrity:
        raise SystemExit(f"{name}@{version}: integrity {got} differs from site/vendor.toml's "
                         f"{integrity}")
    return dest


def vendor(work: Path) -> Path:
    """Unpack what site/vendor.toml names into ``work/vendor/{static,extra,shared}``."""
    spec = tomllib.loads((SITE / "vendor.toml").read_text())
    out = work / "vendor"
    shutil.rmtree(out, ignore_errors=True)
    for name, pkg in spec.items():
        tgz = npm_tarball(name, pkg["version"], pkg["integrity"], work.parent / "site-cache")
        with tarfile.open(tgz) as tar:
            files = [m for m in tar.getmembers() if m.isfile()]
            for pattern, to in pkg["copy"]:
                matched = 0
                for m in files:
                    rel = m.name.removeprefix("package/")
                    if fnmatch.fnmatchcase(rel, pattern):
                        target = out / to / Path(rel).name
                    elif rel.startswith(pattern + "/"):
                        target = out / to / Path(pattern).name / rel[len(pattern) + 1:]
                    else:
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(m).read())  # type: ignore[union-attr]
                    matched += 1
                if not matched:
                    raise SystemExit(f"site/vendor.toml: {name}@{pkg['version']} has no "
                                     f"{pattern!r}")
    return out


# ------------------------------------------------------------------ the live page's Python

def shared_files(work: Path, vendored: Path, commit: str) -> Path:
    """``_shared/`` at the site's root: Pyodide, the package's wheel, the page's module."""
    shared = vendored / "shared"
    wheels = work / "wheel"
    shutil.rmtree(wheels, ignore_errors=True)
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
       "-w", wheels, ROOT, cwd=work)
    wheel = next(wheels.glob(f"{PACKAGE}-*-py3-none-any.whl"))
    shutil.copy2(wheel, shared / wheel.name)
    shutil.copy2(SITE / "live" / "trace_page.py", shared / "trace_page.py")
    (shared / "manifest.json").write_text(json.dumps({"wheel": wheel.name, "commit": commit}))
    return shared


# ------------------------------------------------------------------ staging one edition

def module_names() -> list[str]:
    """Every importable module of the package, found by walking its files (so the API
    reference follows any move), ``__main__`` and private modules left out."""
    names = []
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(p.startswith("_") for p in parts) or "." in "".join(parts):
            continue
        if all((ROOT / Path(*parts[:i]) / "__init__.py").exists() for i in range(1, len(parts))):
            names.append(".".join(parts))
    return names


def public_names() -> list[str]:
    """The package's ``__all__``, read from its ``__init__.py`` without importing it."""
    tree = ast.parse((ROOT / PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__"
                                                for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    return []


def api_pages(src: Path, words: dict) -> None:
    mods = module_names()
    api = src / "api"
    api.mkdir()
    for mod in mods:
        (api / f"{mod}.md").write_text(
            f"# `{mod}`\n\n```{{eval-rst}}\n.. automodule:: {mod}\n   :members:\n"
            "   :show-inheritance:\n```\n")
    names = "\n".join(f"- {{py:obj}}`~.{n}`" for n in public_names())
    toc = "\n".join(f"{mod}" for mod in mods)
    (api / "index.md").write_text(
        f"# {words['api_title']}\n\n{words['api_intro'].format(package=PACKAGE)}\n\n"
        f"{words['api_names'].format(package=PACKAGE)}\n\n{names}\n\n"
        f"```{{toctree}}\n:maxdepth: 1\n\n{toc}\n```\n")


def notebook_time(nb: dict, not_stated: str = "not stated yet") -> str:
    """How long the notebook takes, in its own words: the first "N min" / "N-M minutes" /
    "N 分鐘" of its opening cell (issue 18 asks every notebook to say it there)."""
    md = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    m = STATED_TIME.search(md[0]) if md else None
    return m.group(0) if m else not_stated


def notebook_title(nb: dict, default: str) -> str:
    """The notebook's first level-1 heading."""
    return next((ln.lstrip("# ").strip() for c in nb["cells"] if c["cell_type"] == "markdown"
                 for ln in "".join(c["source"]).splitlines() if ln.startswith("# ")), default)


def translated_title(catalog: Path, english: str) -> str | None:
    """The catalog's translation of a notebook's heading (a translated, non-fuzzy entry)."""
    if not catalog.exists():
        return None
    import polib

    entry = polib.pofile(str(catalog)).find(english)
    return entry.msgstr if entry and entry.msgstr and "fuzzy" not in entry.flags else None


def run_seconds(nb: dict) -> float:
    """How long the stored run of the notebook took, from nbconvert's cell timestamps."""
    times = [datetime.fromisoformat(c["metadata"]["execution"][k].replace("Z", "+00:00"))
             for c in nb["cells"] if "execution" in c.get("metadata", {})
             for k in ("iopub.execute_input", "shell.execute_reply")
             if k in c["metadata"]["execution"]]
    return (max(times) - min(times)).total_seconds() if times else float("nan")


def course_path(notebooks: list[Path], words: dict, missing: list[Path] = (),
                catalogs: Path | None = None, root: str = "") -> str:
    """The path's table: each of the edition's notebooks, its title, stated time and stored
    run time. ``missing``: the first edition's notebooks this edition has no translation of
    yet, each listed at its place with the catalog's translation of its heading (else the
    English one), linked to the first edition's page (``root``) and marked untranslated."""
    rows = ["| " + " | ".join(words["path_header"]) + " |", "|---|---|---|"]
    for path in sorted([*notebooks, *missing], key=lambda p: p.name):
        nb = json.loads(path.read_text())
        title = notebook_title(nb, path.stem)
        ran = words["seconds"].format(s=f"{run_seconds(nb):.0f}")
        if path in missing:
            m = STATED_TIME.search(notebook_time(nb, ""))
            time_ = (words["minutes"].format(n="–".join(g for g in m.groups() if g))
                     if m else words["not_stated"])
            title = (translated_title(catalogs / f"{path.stem}.po", title) if catalogs
                     else None) or title
            href = f"{root}notebooks/{path.stem}.html"
            rows.append(f'| <a href="{href}">{title}</a>{words["untranslated"]} | {time_} | '
                        f"{ran} |")
        else:
            rows.append(f"| [{title}](notebooks/{path.name}) | "
                        f"{notebook_time(nb, words['not_stated'])} | {ran} |")
    return "\n".join(rows) + "\n"


def _explicit_anchor(path: Path, anchor: str) -> bool:
    """Whether ``path`` holds ``<a id="anchor">`` (escaped quotes too: a notebook's JSON)."""
    return path.suffix in (".ipynb", ".md") and re.search(
        r'id=\\?"' + re.escape(anchor) + r'\\?"', path.read_text(encoding="utf-8")) is not None


class Links:
    """Where each repository file lands in the staged tree, to rewrite relative links.
    ``elsewhere``: files another edition holds (its notebooks), as paths from the site's
    root, reached through ``root`` (this edition's way up to the site's root)."""

    def __init__(self, staged: dict[Path, str], repo_url: str, commit: str,
                 elsewhere: dict[Path, str] | None = None, root: str = "",
                 own_api: bool = True) -> None:
        self.staged = staged  # repo path (relative to ROOT) -> staged path
        self.elsewhere, self.root = elsewhere or {}, root
        for mod in module_names():
            parts = mod.split(".")
            init = Path(*parts, "__init__.py")
            path = init if (ROOT / init).exists() else Path(*parts).with_suffix(".py")
            if own_api:
                self.staged[path] = f"api/{mod}.md"
            else:  # the first edition's API pages (the docstrings are English)
                self.elsewhere[path] = f"api/{mod}.html"
        self.dests = set(staged.values())
        self.sources = {dest: path for path, dest in staged.items()}
        self.repo_url, self.commit = repo_url, commit
        self.dropped: list[str] = []

    def rewrite(self, text: str, repo_dir: Path, staged_dir: str) -> str:
        def one(m: re.Match) -> str:
            label, target = m.group(1), m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
                return m.group(0)
            path, _, anchor = target.partition("#")
            repo_path = Path(os.path.normpath(repo_dir / path))
            in_site = os.path.normpath(os.path.join(staged_dir, path))
            if in_site in self.dests or repo_path in self.staged:
                dest = in_site if in_site in self.dests else self.staged[repo_path]
                rel = os.path.relpath(dest, staged_dir or ".")
                source = self.sources.get(dest)
                if anchor and source is not None and _explicit_anchor(ROOT / source, anchor):
                    # an HTML anchor (<a id=...>, one id in every edition): Sphinx knows only
                    # headings, so the link goes out as HTML to the built page
                    page = Path(rel).with_suffix(".html").as_posix()
                    return f'<a href="{page}#{anchor}">{label}</a>'
                if in_site in self.dests:
                    return m.group(0)  # already a path in the site (the pages are written so)
                return f"[{label}]({rel}{'#' + anchor if anchor else ''})"
            if repo_path in self.elsewhere:  # a page of another edition: raw HTML, as
                up = "../" * len(Path(staged_dir).parts) + self.root  # Sphinx cannot see it
                href = self.elsewhere[repo_path] + (f"#{anchor}" if anchor else "")
                return f'<a href="{up}{href}">{label}</a>'
            if self.repo_url and (ROOT / repo_path).exists():
                return f"[{label}]({self.repo_url}/blob/{self.commit}/{repo_path.as_posix()})"
            self.dropped.append(target)
            return label  # a file the site does not hold: keep the words, drop the link
        return LINK.sub(one, text)


def edition_notebooks(ed: dict) -> list[Path]:
    return sorted((ROOT / ed["notebooks"]).glob(NOTEBOOK_GLOB))


def stage(name: str, ed: dict, src: Path, vendored: Path, ctx: dict,
          editions: dict[str, dict]) -> list[str]:
    """Lay out one edition's Sphinx sources in ``src``; returns the links it dropped.

    A link to a page of another edition (``site/en/live_trace.md``) goes to this edition's
    page of that name; a link to another edition's notebook goes to that edition's page of
    it (a translation links its original so). The first edition's notebooks that this one
    has not translated yet are listed on its path, linked to the first edition's pages."""
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    pages_dir, nb_dir = Path(ed["pages"]), Path(ed["notebooks"])
    notebooks = edition_notebooks(ed)
    if not notebooks:
        raise SystemExit(f"edition {name}: no {nb_dir}/{NOTEBOOK_GLOB}")
    own_pages = {p.name for p in (ROOT / pages_dir).glob("*.md")}
    other_pages = {Path(other["pages"]) / page for n, other in editions.items() if n != name
                   for page in own_pages}
    staged = {path: path.name for path in other_pages} | {pages_dir / p: p for p in own_pages}
    staged |= {nb_dir / p.name: f"notebooks/{p.name}" for p in notebooks}
    if (ROOT / ARCHITECTURE).exists():
        staged[ARCHITECTURE] = "architecture.md"
    first = next(iter(editions))
    prefix = {n: "" if i == 0 else f"{n}/" for i, n in enumerate(editions)}
    elsewhere = {Path(other["notebooks"]) / p.name: f"{prefix[n]}notebooks/{p.stem}.html"
                 for n, other in editions.items() if n != name for p in edition_notebooks(other)}
    translated = {p.name for p in notebooks}
    missing = [p for p in edition_notebooks(editions[first]) if p.name not in translated]
    # a link to a translation still to come: the first edition's page, until it exists
    elsewhere |= {nb_dir / p.name: f"notebooks/{p.stem}.html" for p in missing}
    # The API reference is the docstrings, in English: built once, in the first edition; the
    # others link to it (a second copy would double the build's time and say nothing new).
    own_api = name == first
    links = Links(staged, ctx["repo_url"], ctx["commit"], elsewhere, ctx["root"], own_api)
    for repo_path, dest in list(staged.items()):
        if dest.startswith("api/") or repo_path in other_pages:
            continue
        out = src / dest
        out.parent.mkdir(parents=True, exist_ok=True)
        staged_dir = str(Path(dest).parent)
        if dest.endswith(".ipynb"):
            nb = json.loads((ROOT / repo_path).read_text())
            for cell in nb["cells"]:
                if cell["cell_type"] == "markdown":
                    cell["source"] = links.rewrite("".join(cell["source"]), repo_path.parent,
                                                   staged_dir)
            out.write_text(json.dumps(nb, ensure_ascii=False))
        else:
            out.write_text(links.rewrite((ROOT / repo_path).read_text(), repo_path.parent,
                                         staged_dir))
    for asset in (ROOT / pages_dir).iterdir():  # pictures beside the pages
        if asset.is_file() and asset.suffix != ".md":
            shutil.copy2(asset, src / asset.name)
    (src / "_generated").mkdir()
    words = ctx["words"]
    catalogs = ROOT / "i18n" / name / "notebooks"
    (src / "_generated" / "course_path.md").write_text(
        course_path(notebooks, words, missing, catalogs if catalogs.is_dir() else None,
                    ctx["root"]))
    pages = [("architecture", words["architecture"])] if ARCHITECTURE in staged else []
    if own_api:
        pages.append(("api/index", words["api"]))
    api_link = "" if own_api else f'- <a href="{ctx["root"]}api/index.html">{words["api"]}</a>\n'
    (src / "_generated" / "package.md").write_text(
        "".join(f"- [{title}]({doc}.md)\n" for doc, title in pages) + api_link
        + f"\n```{{toctree}}\n:hidden:\n:caption: {words['package_caption']}\n\n"
        + "".join(f"{doc}\n" for doc, _ in pages) + "```\n")
    if own_api:
        api_pages(src, words)
    ctx["sources"] = {dest: str(p) for p, dest in staged.items() if p not in other_pages}
    if missing:
        print(f"site: {name}: {len(missing)} notebook(s) of {first} not in {nb_dir}/ yet, "
              f"listed on its path and linked to {first}'s pages: "
              + ", ".join(p.name for p in missing))
    return links.dropped


def edition_words(editions: dict[str, dict]) -> dict[str, dict]:
    """Each edition's words for what the build writes (``[<edition>.words]``): the first
    edition names them all, and every other edition must translate every one."""
    names = list(editions)
    keys = set(editions[names[0]].get("words", {}))
    for name in names:
        lacking = sorted(keys - set(editions[name].get("words", {})))
        if lacking:
            raise SystemExit(f"site/editions.toml: [{name}.words] lacks {', '.join(lacking)}")
    return {name: editions[name]["words"] for name in names}


def build(out: Path, work: Path, repo_url: str, editions_file: Path) -> None:
    t0 = time.perf_counter()
    editions = tomllib.loads(editions_file.read_text())
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    work.mkdir(parents=True, exist_ok=True)
    vendored = vendor(work)
    shared = shared_files(work, vendored, commit)
    t_vendor = time.perf_counter() - t0
    names = list(editions)
    words = edition_words(editions)
    first = {p.name for p in edition_notebooks(editions[names[0]])}
    all_eds = [{"name": n, "label": editions[n]["label"], "prefix": "" if i == 0 else f"{n}/",
                "own_api": i == 0,  # the API reference is built once, in the first edition
                "missing": sorted(f"notebooks/{Path(nb).stem}" for nb in first - {
                    p.name for p in edition_notebooks(editions[n])})}
               for i, n in enumerate(names)]
    warnings = 0
    shutil.rmtree(out, ignore_errors=True)
    runs = []  # the editions' sphinx-builds run side by side (each is one process)
    for i, name in enumerate(names):
        ed = editions[name]
        ctx = {"edition": name, "language": ed["sphinx_language"], "editions": all_eds,
               "root": "" if i == 0 else "../", "commit": commit, "repo_url": repo_url,
               "vendor": str(vendored), "words": words[name]}
        src = work / name / "src"
        dropped = stage(name, ed, src, vendored, ctx, editions)
        for target in dropped:
            print(f"site: {name}: link to {target} dropped (no such page on the site)")
        html = work / name / "html"
        shutil.rmtree(html, ignore_errors=True)
        # CHUNKPREFILL_LANG: the package's tr speaks the edition's language in Sphinx (the
        # live page's static texts), with no font needed (nothing is drawn)
        env = {**os.environ, "CHUNKPREFILL_SITE": json.dumps(ctx), "PYTHONHASHSEED": "0",
               "CHUNKPREFILL_LANG": name}
        log = open(work / name / "sphinx.log", "w+")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(SITE),
             "-d", str(work / name / "doctrees"), str(src), str(html)],
            env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        runs.append((i, name, html, proc, log, time.perf_counter()))
    for i, name, html, proc, log, started in runs:
        rc = proc.wait()
        log.seek(0)
        text = log.read()
        log.close()
        sys.stderr.write(text)
        if rc:
            raise SystemExit(f"sphinx-build failed for edition {name} (rc {rc})")
        warnings += text.count("WARNING")
        print(f"site: {name}: sphinx-build {time.perf_counter() - started:.1f} s")
        shutil.copytree(html, out / all_eds[i]["prefix"], dirs_exist_ok=True)
    shutil.copytree(shared, out / "_shared")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"site: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}: "
          f"{len(names)} edition(s), {size / 2**20:.1f} MiB, {warnings} warning(s), "
          f"commit {commit[:12]}; {time.perf_counter() - t0:.1f} s "
          f"(vendoring and wheel {t_vendor:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "site-work")
    ap.add_argument("--repo-url", default=os.environ.get("SITE_REPO_URL", ""),
                    help="the repository's web address: source links then point to "
                         "REPO/blob/COMMIT/...; without it the site holds the source itself")
    ap.add_argument("--editions", type=Path, default=SITE / "editions.toml",
                    help="the editions to build (default: site/editions.toml)")
    args = ap.parse_args()
    build(args.out.resolve(), args.work.resolve(), args.repo_url.rstrip("/"), args.editions)


if __name__ == "__main__":
    main()
