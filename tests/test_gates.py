"""Upstream checkout mode's gates: each check runs on the base and on the series, and only what is new fails.

The tools are stand-ins (small scripts with the real tools' interfaces), so nothing is installed.
"""

from __future__ import annotations

import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from conftest import commit, git
from patchseries import gates
from patchseries.errors import SeriesError
from patchseries.gates import (
    UPSTREAM_MODULES,
    Comparison,
    _module_of,
    changed_pages,
    compare,
    findings,
    read_config,
    requirement_args,
    run_docs_gate,
    run_hooks,
    run_static_gates,
)
from patchseries.paths import Workspace
from patchseries.progress import quiet
from patchseries.runner import Environment

CONFIG = """\
exclude: ^vendored/
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
# A fixer that strips trailing spaces (exit 1 when it rewrote), and a checker that prints "path:line: ..."
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
    if name.startswith("-") or not pathlib.Path(name).is_file():
        continue
    for number, line in enumerate(pathlib.Path(name).read_text().splitlines(), 1):
        if "{word}" in line:
            print(f"{{name}}:{{number}}: {word} ==> the")
            found = 1
print("summary: some lines")
sys.exit(found)
"""
CRASH = "import sys\nprint('Traceback: boom', file=sys.stderr)\nsys.exit(2)\n"  # fails on any file, as on the base


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def _tree(tmp_path: Path, base: dict[str, str], series: dict[str, str]) -> Path:
    """An upstream-like tree: branch ``base`` at the release, ``HEAD`` one commit of the series on it."""
    tree = tmp_path / "upstream"
    tree.mkdir()
    git(tree, "init", "-q")
    commit(tree, base, "release")
    git(tree, "branch", "base")
    commit(tree, series, "series")
    return tree


def _ws(tmp_path: Path) -> Workspace:
    return Workspace(patches=tmp_path / "patches", workdir=tmp_path / "work")


def test_config_is_read_with_upstreams_overrides_and_names_what_is_not_run(tmp_path):
    (tmp_path / "c.yaml").write_text(CONFIG)

    hooks = {hook.label: hook for hook in read_config(tmp_path / "c.yaml")}

    assert list(hooks) == [
        "pre-commit trailing-whitespace",
        "pre-commit check-added-large-files (--maxkb=350 --enforce-all)",
        "pre-commit codespell",
        "pre-commit ruff (--fix --unsafe-fixes)",
        "pre-commit ruff-format",
        "pre-commit ruff",
        "pre-commit prettier",
    ]
    assert hooks["pre-commit trailing-whitespace"].entry == ("trailing-whitespace-fixer",)
    assert hooks["pre-commit ruff (--fix --unsafe-fixes)"].entry == (
        "ruff", "check", "--force-exclude", "--fix", "--unsafe-fixes"
    )  # fmt: skip
    assert hooks["pre-commit codespell"].requirements == ("codespell==2.4.1", "tomli")
    assert hooks["pre-commit ruff"].requirements == ("ruff==0.14.10",)
    assert hooks["pre-commit prettier"].not_run.startswith("not a hook patchseries installs from PyPI")
    assert [label for label, hook in hooks.items() if hook.not_run] == ["pre-commit prettier"]


def test_a_config_that_is_not_pre_commits_is_refused(tmp_path):
    (tmp_path / "c.yaml").write_text("repos: [\n")

    with pytest.raises(SeriesError, match="is not a pre-commit configuration"):
        read_config(tmp_path / "c.yaml")


def test_files_are_selected_as_pre_commit_selects_them(tmp_path):
    (tmp_path / "c.yaml").write_text(CONFIG)
    whitespace, _, _, ruff, *_ = read_config(tmp_path / "c.yaml")

    assert whitespace.selects("src/a.py", {"file", "text", "python"})
    assert not whitespace.selects("README.md", {"file", "text", "markdown"})  # the hook's exclude
    assert not whitespace.selects("docs/logo.png", {"file", "binary", "image"})  # types: [text]
    assert ruff.selects("src/a.pyi", {"file", "text", "pyi"})  # types_or: [python, pyi, jupyter]
    assert not ruff.selects("vendored/a.py", {"file", "text", "python"})  # the config's top-level exclude


@pytest.fixture
def fake_hooks(tmp_path, monkeypatch):
    """Every hook's environment holds stand-ins of the hooks' commands."""
    venv = tmp_path / "fake-env"
    for name, body in {"trailing-whitespace-fixer": FIXER, "check-added-large-files": CRASH, "ruff": "",
                       "codespell": CHECKER.format(word="teh")}.items():  # fmt: skip
        _script(venv / "bin" / name, body)
    monkeypatch.setattr(gates, "hook_environment", lambda ws, hook, log: venv)


def test_only_what_the_base_does_not_have_fails_counted_and_the_tree_is_not_touched(tmp_path, fake_hooks):
    base_text = "x = 1   \n# teh base\n"
    tree = _tree(
        tmp_path,
        {".pre-commit-config.yaml": CONFIG, "a.py": base_text, "README.md": "r  \n"},
        {"a.py": base_text + "y = 2 \n# teh series\n", "b.py": "z = 3\n", "README.md": "r  \nmore  \n"},
    )
    before = {path: (tree / path).read_bytes() for path in ("a.py", "b.py", "README.md")}

    comparisons = {c.name: c for c in run_hooks(_ws(tmp_path), tree, quiet)}

    whitespace = comparisons["pre-commit trailing-whitespace"]
    assert whitespace.checked == 2  # a.py and b.py; README.md is excluded
    # a fixer's findings are the lines it rewrites, by content: a new problem in a file that already had one is new
    assert whitespace.new == ["a.py: +'y = 2'", "a.py: -'y = 2 '"]
    assert whitespace.pre_existing == ["a.py: +'x = 1'", "a.py: -'x = 1   '"]
    codespell = comparisons["pre-commit codespell"]
    assert codespell.checked == 3
    assert codespell.new == ["a.py: teh ==> the"]  # a second copy of the base's typo, its line number left out
    assert codespell.pre_existing == ["a.py: teh ==> the"]
    # a hook that fails naming no file crashed: it fails although it failed on the base too
    large = comparisons["pre-commit check-added-large-files (--maxkb=350 --enforce-all)"]
    assert large.new == ["exit status 2: Traceback: boom"]
    assert comparisons["pre-commit prettier"].line().startswith("pre-commit prettier: not run: not a hook")
    assert comparisons["pre-commit ruff (--fix --unsafe-fixes)"].line() == (
        "pre-commit ruff (--fix --unsafe-fixes): 2 checked, no new failure, 0 pre-existing"
    )
    assert {path: (tree / path).read_bytes() for path in before} == before  # fixers ran in a throwaway clone
    assert git(tree, "status", "--porcelain") == ""


def test_a_hook_that_cannot_be_installed_stops_the_job(tmp_path, monkeypatch):
    tree = _tree(tmp_path, {".pre-commit-config.yaml": CONFIG, "a.py": "A = 1\n"}, {"a.py": "A = 2\n"})

    def cannot(ws, hook, log):
        raise SeriesError(f"cannot install {hook.requirements[0]}: no network")

    monkeypatch.setattr(gates, "hook_environment", cannot)
    with pytest.raises(SeriesError, match="cannot install pre-commit-hooks==6.0.0"):
        run_hooks(_ws(tmp_path), tree, quiet)


def _env(tmp_path: Path, body: str) -> Environment:
    _script(tmp_path / "venv" / "bin" / "python", body)
    return Environment(tmp_path / "venv", "2.13.0")


def test_mypy_fails_on_new_errors_and_on_a_crash(tmp_path):
    tree = _tree(tmp_path, {"src/m.py": "bad = 1\n"}, {"src/m.py": "ok = 0\nbad = 1\nbad = 2\n", "tests/t.py": "bad\n"})
    checker = CHECKER.replace("==> the", "error: name [x]").format(word="bad")

    (mypy,) = run_static_gates(_ws(tmp_path), _env(tmp_path, checker), tree, quiet)

    assert (mypy.name, mypy.checked) == ("mypy", 1)  # under src/ only
    assert mypy.new == ["src/m.py: bad error: name [x]"]
    assert mypy.pre_existing == ["src/m.py: bad error: name [x]"]
    (crashed,) = run_static_gates(_ws(tmp_path), _env(tmp_path / "2", CRASH), tree, quiet)
    assert crashed.new == ["exit status 2: Traceback: boom"]


# Warns like Sphinx, "<source>/<page>.rst:<line>: WARNING: ...", for each `.. bogus::` in the pages it reads
FAKE_SPHINX = """\
import pathlib, sys
source = pathlib.Path(sys.argv[sys.argv.index("-c") + 2])
for page in sorted(source.rglob("*.rst")):
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith(".. bogus::"):
            print(f"{page}:{number}: WARNING: Unknown directive type \\"bogus\\".", file=sys.stderr)
"""
BOGUS = 'docs/source-x/guide.rst: WARNING: Unknown directive type "bogus".'
RELEASE = {"docs/source-x/conf.py": "", "docs/source-x/guide.rst": "Guide\n=====\n\n.. bogus::\n", "src/a.py": ""}


def test_docs_only_warnings_the_series_adds_are_new(tmp_path):
    tree = _tree(tmp_path, RELEASE, {"docs/source-x/guide.rst": "Guide\n=====\n\nMore.\n\n.. bogus::\n\n.. bogus::\n"})

    result = run_docs_gate(_ws(tmp_path), _env(tmp_path, FAKE_SPHINX), tree, quiet)

    assert result is not None
    assert result.checked == 1
    # the base's warning moved down a line: pre-existing, not new; the second broken directive is new
    assert result.new == [BOGUS]
    assert result.pre_existing == [BOGUS]


def test_docs_a_new_page_is_built_and_other_pages_are_stubs(tmp_path):
    page = "docs/source-x/new/page.rst"
    tree = _tree(tmp_path, RELEASE, {page: "New\n===\n\n.. bogus::\n", "docs/top.rst": "Top\n===\n\n.. bogus::\n"})

    result = run_docs_gate(_ws(tmp_path), _env(tmp_path, FAKE_SPHINX), tree, quiet)

    assert changed_pages(tree) == ["docs/source-x/new/page.rst", "docs/top.rst"]
    assert result is not None
    assert result.checked == 1  # docs/top.rst belongs to no docs project (no conf.py): not built
    assert result.new == [BOGUS.replace("guide", "new/page")]  # guide.rst, unchanged, is a stub: no warning
    assert "1 NEW" in result.line()


def test_a_series_without_docs_changes_has_no_docs_gate(tmp_path):
    tree = _tree(tmp_path, RELEASE, {"src/a.py": "A = 2\n"})

    assert run_docs_gate(_ws(tmp_path), _env(tmp_path, FAKE_SPHINX), tree, quiet) is None


def test_requirements_come_from_upstream_files_without_their_torch_pin(tmp_path):
    tree = tmp_path / "lightning"
    (tree / "requirements" / "pytorch").mkdir(parents=True)
    (tree / "requirements" / "pytorch" / "test.txt").write_text("pytest ==9.0.2\n")
    (tree / "requirements" / "typing.txt").write_text("torch==2.9.1\nmypy==1.19.1\n")
    ws = _ws(tmp_path)

    args = requirement_args(ws, tree)

    assert args[:3] == ("-r", str(tree / "requirements" / "pytorch" / "test.txt"), "-r")
    assert args[3].startswith(str(ws.reports))
    assert Path(args[3]).read_text() == "mypy==1.19.1\n"
    assert (tree / "requirements" / "typing.txt").read_text().startswith("torch==2.9.1")  # upstream file untouched


def test_failures_the_base_also_has_are_pre_existing():
    comparison = compare("upstream tests", 10, Counter(["test_a::x", "test_b::y"]), Counter(["test_b::y", "t::z"]))

    assert comparison.new == ["test_a::x"]
    assert comparison.pre_existing == ["test_b::y"]
    assert comparison.line() == "upstream tests: 10 checked, 1 NEW: test_a::x, 1 pre-existing"
    assert Comparison("x", note="not run: why").line() == "x: not run: why"


def test_widened_modules_cover_the_code_the_series_changes():
    for module in (
        "tests/tests_pytorch/core",
        "tests/tests_pytorch/trainer/optimization",
        "tests/tests_pytorch/loops",
        "tests/tests_pytorch/strategies",
        "tests/tests_pytorch/plugins/precision",
        "tests/tests_pytorch/models/test_hooks.py",
        "tests/tests_pytorch/utilities/test_compile.py",
        "tests/tests_fabric/test_wrappers.py",
        "tests/tests_fabric/test_fabric.py",
    ):
        assert module in UPSTREAM_MODULES


def test_a_failure_is_traced_to_its_module_for_the_rerun_on_the_base(tmp_path):
    module = tmp_path / "tests" / "tests_pytorch" / "strategies" / "test_fsdp.py"
    module.parent.mkdir(parents=True)
    module.write_text("")
    expected = str(module.relative_to(tmp_path))

    assert _module_of(tmp_path, "tests.tests_pytorch.strategies.test_fsdp::test_x[1]") == expected
    assert _module_of(tmp_path, "tests_pytorch.strategies.test_fsdp.TestCls::test_y") == expected
    assert _module_of(tmp_path, "::tests.tests_pytorch.strategies.test_fsdp") == expected  # it failed to import
    assert _module_of(tmp_path, "tests.tests_pytorch.gone::test_z") == ""


def test_findings_name_files_without_line_numbers_and_put_rewritten_files_back(tmp_path):
    (tmp_path / "a.py").write_text("x = 1 \n")
    fixer = _script(tmp_path / "bin" / "fix", FIXER)

    assert findings([str(fixer)], tmp_path, ["a.py"]) == Counter(["a.py: -'x = 1 '", "a.py: +'x = 1'"])
    assert (tmp_path / "a.py").read_text() == "x = 1 \n"
    assert findings([str(fixer)], tmp_path, []) == Counter()  # no file: not run (a hook would check everything)
