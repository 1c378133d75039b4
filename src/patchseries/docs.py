"""Upstream checkout mode's docs gate: Sphinx parses the ``.rst`` files the series changes, on the series and the base.

Upstream's full docs build needs its private theme and network access, so the gate builds a small Sphinx project with
the changed pages only, with the extensions their directives need (``testcode``, ``collapse``, ``autosummary``) and the
docs' own templates, and compares Sphinx's warnings on the series with those on the base: only new warnings fail.
Cross-references to pages outside the small project stay unresolved on both sides, so they cancel out.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from patchseries.base import BASE_BRANCH, base_worktree
from patchseries.environment import Environment
from patchseries.gitcmd import out
from patchseries.paths import Workspace
from patchseries.progress import Log
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
# "path/to/page.rst:12: WARNING: message" -> "path/to/page.rst: WARNING: message" (line numbers move with edits)
_WARNING = re.compile(r"^(?P<path>[^:\s]+\.rst)(?::\d+)?: (?P<level>WARNING|ERROR|SEVERE|CRITICAL): (?P<text>.+)$")


def changed_pages(tree: Path) -> list[str]:
    """The ``docs/**.rst`` files the series adds or changes."""
    changed = out("diff", "--name-only", "--diff-filter=AM", BASE_BRANCH, "HEAD", "--", "docs", cwd=tree).split()
    return [path for path in changed if path.endswith(".rst")]


def run_docs_gate(ws: Workspace, env: Environment, tree: Path, log: Log) -> Comparison | None:
    pages = changed_pages(tree)
    if not pages:
        return None
    log(f"docs: Sphinx on the {len(pages)} changed pages, series and base")
    after = sphinx_warnings(env, tree, pages)
    base_tree = base_worktree(ws, tree)
    before = sphinx_warnings(env, base_tree, [p for p in pages if (base_tree / p).is_file()])
    comparison = Comparison("docs (sphinx)", checked=len(pages))
    comparison.new = sorted(after - before)
    comparison.pre_existing = sorted(after & before)
    return comparison


def sphinx_warnings(env: Environment, tree: Path, pages: list[str]) -> set[str]:
    """Sphinx's warnings for ``pages`` of ``tree``, each project (``docs/source-*``) built on its own."""
    warnings: set[str] = set()
    by_project: dict[str, list[str]] = {}
    for page in pages:
        project = "/".join(page.split("/")[:2])  # docs/source-pytorch
        by_project.setdefault(project, []).append(page)
    for project, project_pages in by_project.items():
        warnings |= _build(env, tree, project, project_pages)
    return warnings


def _build(env: Environment, tree: Path, project: str, pages: list[str]) -> set[str]:
    with tempfile.TemporaryDirectory(prefix="patchseries-docs-") as tmp:
        source = Path(tmp) / "source"
        documents = []
        for page in pages:
            relative = Path(page).relative_to(project)
            target = source / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text((tree / page).read_text())
            documents.append(str(relative.with_suffix("")))
        templates = tree / project / "_templates"
        (source / "conf.py").write_text(
            f"extensions = {list(_EXTENSIONS)!r}\n"
            f"templates_path = [{str(templates)!r}]\n"
            "autosummary_generate = True\n"
            "doctest_test_doctest_blocks = ''\n"
        )
        (source / "index.rst").write_text("Pages\n=====\n\n.. toctree::\n\n" + "".join(f"   {d}\n" for d in documents))
        proc = subprocess.run(
            [str(env.python), "-m", "sphinx", "-b", "html", "-q", "-E", str(source), str(Path(tmp) / "html")],
            cwd=tree, capture_output=True, text=True, check=False,
        )  # fmt: skip
        warnings = set()
        for line in proc.stderr.splitlines():
            match = _WARNING.match(line.strip().replace(str(source) + "/", f"{project}/"))
            if match:
                warnings.add(f"{match.group('path')}: {match.group('level')}: {match.group('text')}")
        if proc.returncode != 0 and not warnings:
            warnings.add(f"{project}: sphinx failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
        return warnings
