"""The docs gate: Sphinx's warnings on the changed pages, new ones only (a stand-in Sphinx, no install needed)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from conftest import commit, git
from patchseries.docs import changed_pages, run_docs_gate
from patchseries.paths import Workspace
from patchseries.progress import quiet
from patchseries.runner import Environment

# Warns like Sphinx, "<source>/<page>.rst:<line>: WARNING: ...", for each `.. bogus::` directive in the pages it builds.
FAKE_SPHINX = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    import pathlib, sys
    source = pathlib.Path(sys.argv[-2])
    for page in sorted(source.rglob("*.rst")):
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith(".. bogus::"):
                print(f"{page}:{number}: WARNING: Unknown directive type \\"bogus\\".", file=sys.stderr)
    """
)


def _fake_env(tmp_path: Path) -> Environment:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_SPHINX)
    python.chmod(0o755)
    return Environment(tmp_path / "venv", "2.13.0")


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "upstream"
    tree.mkdir()
    git(tree, "init", "-q")
    commit(tree, {"docs/source-x/guide.rst": "Guide\n=====\n\n.. bogus::\n", "src/a.py": "A = 1\n"}, "release")
    git(tree, "branch", "base")
    return tree


def test_only_warnings_the_series_adds_are_new(tmp_path):
    tree = _tree(tmp_path)
    commit(tree, {"docs/source-x/guide.rst": "Guide\n=====\n\nMore.\n\n.. bogus::\n\n.. bogus::\n"}, "docs")
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")

    result = run_docs_gate(ws, _fake_env(tmp_path), tree, quiet)

    assert result is not None
    assert result.checked == 1
    # the base's warning moved a line down: pre-existing, not new; the second broken directive is new
    assert result.new == ['docs/source-x/guide.rst: WARNING: Unknown directive type "bogus".']
    assert result.pre_existing == ['docs/source-x/guide.rst: WARNING: Unknown directive type "bogus".']


def test_a_new_page_with_a_broken_directive_fails(tmp_path):
    tree = _tree(tmp_path)
    commit(tree, {"docs/source-y/new.rst": "New\n===\n\n.. bogus::\n"}, "new page")
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")

    result = run_docs_gate(ws, _fake_env(tmp_path), tree, quiet)

    assert result is not None
    assert result.new == ['docs/source-y/new.rst: WARNING: Unknown directive type "bogus".']
    assert "1 NEW" in result.line()


def test_a_series_without_docs_changes_has_no_docs_gate(tmp_path):
    tree = _tree(tmp_path)
    commit(tree, {"src/a.py": "A = 2\n"}, "code")

    assert changed_pages(tree) == []
    assert run_docs_gate(Workspace(tmp_path / "p", tmp_path / "w"), _fake_env(tmp_path), tree, quiet) is None


def test_an_index_page_a_page_directly_under_docs_and_uncommitted_edits_are_checked(tmp_path):
    tree = _tree(tmp_path)
    commit(tree, {"docs/source-x/index.rst": "Index\n=====\n\n.. bogus::\n", "docs/top.rst": "Top\n===\n"}, "pages")
    (tree / "docs/top.rst").write_text("Top\n===\n\n.. bogus::\n")  # not committed: still what the job tests
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")

    result = run_docs_gate(ws, _fake_env(tmp_path), tree, quiet)

    assert result is not None
    assert result.new == [
        'docs/source-x/index.rst: WARNING: Unknown directive type "bogus".',
        'docs/top.rst: WARNING: Unknown directive type "bogus".',
    ]
