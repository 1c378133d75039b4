"""Upstream checkout mode's docs gate: Sphinx parses the ``.rst`` files the series changes, on the series and the base.

Upstream's full docs build needs its private theme and network access, so the gate builds a small Sphinx project with
the changed pages, with the extensions their directives need (``testcode``, ``collapse``, ``autosummary``) and the
docs' own templates, and compares Sphinx's warnings on the series with those on the base: only new warnings fail.
Every other page of the same docs project is there as a stub with the page's labels, so that ``:doc:`` and ``:ref:``
links to it resolve, and a link to a page or label that does not exist is reported.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from patchseries.environment import Environment
from patchseries.gitcmd import out
from patchseries.paths import Workspace
from patchseries.progress import Log
from patchseries.trees import BASE_REF, base_worktree
from patchseries.upstream import Comparison

# Sphinx and the extensions the pages' directives need, in the releases upstream's requirements/docs.txt allows.
DOCS_REQUIREMENTS = ("sphinx>5.0,<6.0", "sphinx-toolbox==4.1.2", "docutils>=0.18.1,<0.20")
_EXTENSIONS = (
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.napoleon",
    "sphinx_toolbox.collapse",
)
_LABEL = re.compile(r"^\.\. _([^:`]+):\s*$", re.MULTILINE)
_ROOT = "patchseries-pages"  # the generated root document; not a name a docs page has
# "path/to/page.rst:12: WARNING: message" -> "path/to/page.rst: WARNING: message" (line numbers move with edits)
_WARNING = re.compile(r"^(?P<path>[^:\s]+\.rst)(?::\d+)?: (?P<level>WARNING|ERROR|SEVERE|CRITICAL): (?P<text>.+)$")


def changed_pages(tree: Path) -> list[str]:
    """The ``docs/**.rst`` files the tree adds or changes against the base, uncommitted edits included (they are
    what the job tests)."""
    changed = out("diff", "--name-only", "--diff-filter=AM", BASE_REF, "--", "docs", cwd=tree).splitlines()
    changed += out("ls-files", "--others", "--exclude-standard", "--", "docs", cwd=tree).splitlines()
    return sorted({path for path in changed if path.endswith(".rst")})


def run_docs_gate(ws: Workspace, env: Environment, tree: Path, log: Log) -> Comparison | None:
    pages = changed_pages(tree)
    if not pages:
        return None
    log(f"docs: Sphinx on the {len(pages)} changed pages, series and base")
    after = sphinx_warnings(env, tree, pages)
    base_tree = base_worktree(ws, tree)
    before = sphinx_warnings(env, base_tree, [p for p in pages if (base_tree / p).is_file()])
    comparison = Comparison("docs (sphinx)", checked=len(pages))
    # counted, not deduplicated: a second copy of a broken directive is a new warning even if the base has one
    comparison.new = sorted((after - before).elements())
    comparison.pre_existing = sorted((after & before).elements())
    return comparison


def sphinx_warnings(env: Environment, tree: Path, pages: list[str]) -> Counter[str]:
    """Sphinx's warnings for ``pages`` of ``tree``, each project (``docs/source-*``) built on its own."""
    warnings: Counter[str] = Counter()
    by_project: dict[str, list[str]] = {}
    for page in pages:
        parts = page.split("/")
        project = "/".join(parts[:2]) if len(parts) > 2 else parts[0]  # docs/source-pytorch, or docs
        by_project.setdefault(project, []).append(page)
    for project, project_pages in by_project.items():
        warnings += _build(env, tree, project, project_pages)
    return warnings


def _write_stubs(project_dir: Path, source: Path, pages: set[str], project: str) -> list[str]:
    """A title-only stub, with the page's ``.. _label:`` targets, for each other ``.rst`` page of the project."""
    stubs = []
    for path in sorted(project_dir.rglob("*.rst")):
        relative = path.relative_to(project_dir)
        if f"{project}/{relative}" in pages or relative.parts[0].startswith(("_", ".")):
            continue
        labels = _LABEL.findall(path.read_text(errors="replace"))
        target = source / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(f".. _{label}:\n\n" for label in labels) + "Stub\n====\n")
        stubs.append(str(relative.with_suffix("")))
    return stubs


def _build(env: Environment, tree: Path, project: str, pages: list[str]) -> Counter[str]:
    with tempfile.TemporaryDirectory(prefix="patchseries-docs-") as tmp:
        source = Path(tmp) / "source"
        documents = []
        for page in pages:
            relative = Path(page).relative_to(project)
            target = source / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text((tree / page).read_text())
            documents.append(str(relative.with_suffix("")))
        stubs = _write_stubs(tree / project, source, set(pages), project)
        templates = tree / project / "_templates"
        (source / "conf.py").write_text(
            f"extensions = {list(_EXTENSIONS)!r}\n"
            f"templates_path = [{str(templates)!r}]\n"
            "autosummary_generate = True\n"
            "doctest_test_doctest_blocks = ''\n"
            f"root_doc = master_doc = {_ROOT!r}\n"
        )
        (source / f"{_ROOT}.rst").write_text(
            "Pages\n=====\n\n.. toctree::\n\n"
            + "".join(f"   {d}\n" for d in documents)
            + "\n.. toctree::\n   :hidden:\n\n"
            + "".join(f"   {d}\n" for d in stubs)
        )
        proc = subprocess.run(
            [str(env.python), "-m", "sphinx", "-b", "html", "-q", "-E", str(source), str(Path(tmp) / "html")],
            cwd=tree, capture_output=True, text=True, check=False,
        )  # fmt: skip
        warnings: Counter[str] = Counter()
        for line in proc.stderr.splitlines():
            match = _WARNING.match(line.strip().replace(str(source) + "/", f"{project}/"))
            if match:
                warnings[f"{match.group('path')}: {match.group('level')}: {match.group('text')}"] += 1
        if proc.returncode != 0 and not warnings:
            warnings[f"{project}: sphinx failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}"] += 1
        return warnings
