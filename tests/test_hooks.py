"""Upstream's pre-commit hooks: the config read as pre-commit reads it, hooks run on a scratch copy, new findings only.

The hooks themselves are stand-ins (small scripts in a fake environment), so no install is needed.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from conftest import commit, git
from patchseries import hooks
from patchseries.hooks import read_config, rewritten_lines, run_hooks
from patchseries.paths import Workspace
from patchseries.progress import quiet

CONFIG = """\
repos:
  - repo: https://github.com/pre-commit/pre-commit-hooks
    rev: v6.0.0
    hooks:
      - id: trailing-whitespace
        exclude: README.md
      - id: check-added-large-files
        args: ["--maxkb=350", "--enforce-all"]
  - repo: https://github.com/codespell-project/codespell
    rev: v2.4.1
    hooks:
      - id: codespell
        additional_dependencies: [tomli]
  - repo: https://github.com/astral-sh/ruff-pre-commit
    rev: v0.14.10
    hooks:
      - id: ruff
        args: ["--fix", "--unsafe-fixes"]
      - id: ruff-format
      - id: ruff
  - repo: https://github.com/JoC0de/pre-commit-prettier
    rev: v3.7.4
    hooks:
      - id: prettier
"""
# Stand-ins with the real hooks' interfaces: a fixer that rewrites its files, a checker that prints "path:line: ..."
FIXER = """\
import pathlib, sys
changed = 0
for name in sys.argv[1:]:
    path = pathlib.Path(name)
    text = path.read_text()
    fixed = "".join(line.rstrip() + "\\n" for line in text.splitlines())
    if fixed != text:
        path.write_text(fixed)
        print(f"Fixing {name}")
        changed = 1
sys.exit(changed)
"""
CHECKER = """\
import pathlib, sys
found = 0
for name in sys.argv[1:]:
    if name.startswith("-"):
        continue
    for number, line in enumerate(pathlib.Path(name).read_text().splitlines(), 1):
        if "teh" in line:
            print(f"{name}:{number}: teh ==> the")
            found = 1
print("summary: some lines")
sys.exit(found)
"""


def test_config_is_read_with_upstreams_overrides_and_names_what_is_not_run(tmp_path):
    config = tmp_path / ".pre-commit-config.yaml"
    config.write_text(CONFIG)

    read = read_config(config)

    labels = [hook.label for hook in read.hooks]
    assert labels == [
        "pre-commit trailing-whitespace",
        "pre-commit check-added-large-files",
        "pre-commit codespell",
        "pre-commit ruff (--fix --unsafe-fixes)",
        "pre-commit ruff-format",
        "pre-commit ruff",
        "pre-commit prettier",
    ]
    by_label = {hook.label: hook for hook in read.hooks}
    whitespace, large = by_label["pre-commit trailing-whitespace"], by_label["pre-commit check-added-large-files"]
    assert whitespace.definition is not None
    assert whitespace.definition.entry == ("trailing-whitespace-fixer",)
    assert whitespace.exclude == "README.md"
    assert large.args == ("--maxkb=350", "--enforce-all")
    assert by_label["pre-commit codespell"].requirements == ("codespell==2.4.1", "tomli")
    assert by_label["pre-commit ruff"].requirements == ("ruff==0.14.10",)
    assert by_label["pre-commit prettier"].not_run.startswith("prettier is an npm package")
    assert not any(hook.not_run for hook in read.hooks[:-1])


def test_files_are_selected_as_pre_commit_selects_them(tmp_path):
    config = tmp_path / ".pre-commit-config.yaml"
    config.write_text(CONFIG)
    whitespace, _, _, ruff, *_ = read_config(config).hooks

    assert whitespace.selects("src/a.py", {"file", "text", "python"}, "", "^$")
    assert not whitespace.selects("README.md", {"file", "text", "markdown"}, "", "^$")  # the hook's exclude
    assert not whitespace.selects("docs/logo.png", {"file", "binary", "image"}, "", "^$")  # types: [text]
    assert ruff.selects("src/a.pyi", {"file", "text", "pyi"}, "", "^$")  # types_or: [python, pyi, jupyter]
    assert not ruff.selects("src/a.py", {"file", "text", "python"}, "", "^src/")  # the config's top-level exclude


def test_a_fixers_findings_are_the_lines_it_rewrites_by_content():
    old = b"def f():\n    x = 1   \n    return x\n"
    new = b"def f():\n    x = 1\n    return x\n"

    assert rewritten_lines("a.py", old, new) == ["a.py: rewrites '    x = 1   '"]
    assert rewritten_lines("a.py", b"A\n", b"A\nB\n") == ["a.py: inserts after 'A'"]


@pytest.fixture
def tree(tmp_path) -> Path:
    """An upstream-like tree: the base with one trailing space and one typo in a.py, the series adding one more each."""
    tree = tmp_path / "upstream"
    tree.mkdir()
    git(tree, "init", "-q")
    base_text = "x = 1   \n# teh base\n"
    commit(tree, {".pre-commit-config.yaml": CONFIG, "a.py": base_text, "README.md": "r  \n"}, "release")
    git(tree, "branch", "base")
    commit(tree, {"a.py": base_text + "y = 2 \n# teh series\n", "b.py": "z = 3\n", "README.md": "r  \nmore  \n"}, "s")
    return tree


@pytest.fixture
def fake_hooks(tmp_path, monkeypatch):
    """Each hook's environment holds a stand-in of its command."""
    venv = tmp_path / "fake-env"
    (venv / "bin").mkdir(parents=True)
    crash = "import sys\nprint('Traceback: boom', file=sys.stderr)\nsys.exit(2)\n"  # fails on any file, as on the base
    for name, script in {"trailing-whitespace-fixer": FIXER, "check-added-large-files": crash, "codespell": CHECKER,
                         "ruff": "", "docformatter": ""}.items():  # fmt: skip
        path = venv / "bin" / name
        path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(script))
        path.chmod(0o755)
    installed = []
    monkeypatch.setattr(hooks, "hook_environment", lambda ws, hook, log: installed.append(hook.label) or venv)
    return installed


def test_only_what_the_base_does_not_have_fails_and_the_tree_is_not_touched(tmp_path, tree, fake_hooks):
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")
    before = {path: (tree / path).read_bytes() for path in ("a.py", "b.py", "README.md")}

    comparisons = {c.name: c for c in run_hooks(ws, tree, quiet)}

    whitespace = comparisons["pre-commit trailing-whitespace"]
    assert whitespace.checked == 2  # a.py and b.py; README.md is excluded
    assert whitespace.new == ["a.py: rewrites 'y = 2 '"]  # a new problem in a file that already had one
    assert whitespace.pre_existing == ["a.py: rewrites 'x = 1   '"]
    codespell = comparisons["pre-commit codespell"]
    assert codespell.checked == 3
    assert codespell.new == ["a.py: teh ==> the"]  # a second copy of the base's typo, its line number left out
    assert codespell.pre_existing == ["a.py: teh ==> the"]
    assert comparisons["pre-commit check-added-large-files"].new == ["exit status 2: Traceback: boom"]
    assert comparisons["pre-commit prettier"].line().startswith("pre-commit prettier: not run: prettier is an npm")
    assert comparisons["pre-commit ruff (--fix --unsafe-fixes)"].line() == (
        "pre-commit ruff (--fix --unsafe-fixes): 2 checked, no new failure, 0 pre-existing"
    )
    assert {path: (tree / path).read_bytes() for path in before} == before  # fixers ran on a scratch copy
    assert git(tree, "status", "--porcelain") == ""


def test_a_hook_that_cannot_be_installed_fails(tmp_path, tree, monkeypatch):
    from patchseries.errors import SeriesError

    def cannot(ws, hook, log):
        raise SeriesError(f"cannot install {hook.requirements[0]}: no network")

    monkeypatch.setattr(hooks, "hook_environment", cannot)
    ws = Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")

    comparisons = {c.name: c for c in run_hooks(ws, tree, quiet)}

    assert comparisons["pre-commit codespell"].new == ["cannot install codespell==2.4.1: no network"]
