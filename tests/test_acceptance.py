"""The acceptance suite: copied into the tree's tests/ as ignored files, run beside the patches' tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import git
from patchseries import job, runner
from patchseries.errors import SeriesError
from patchseries.gitcmd import git_path, uncommitted_files
from patchseries.job import BaseChoice, install_acceptance, prepare, ran_per_group, source_files, write_harness
from patchseries.paths import PROJECT_ROOT, Workspace
from patchseries.progress import quiet
from patchseries.runner import Environment
from patchseries.series import read_series

ONE_MODULE = "tests_pytorch/core/test_compile_optimizer_toggling.py"  # one of the suite's modules


def _suite(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def suite(synthetic) -> Path:
    """An acceptance suite beside the synthetic series (a Workspace without a project root looks there)."""
    return _suite(
        synthetic.ws.acceptance,
        {
            "tests_pytorch/core/test_accept.py": "def test_accepted():\n    pass\n",
            "tests_pytorch/helpers/accept_helpers.py": "HELPER = 1\n",
            "tests_fabric/test_fabric_accept.py": "def test_fabric_accepted():\n    pass\n",
            "README.md": "not copied\n",
        },
    )


def test_the_project_has_its_acceptance_folder_for_both_series():
    ws = Workspace.default()
    forward = Workspace.default(patches=PROJECT_ROOT / "patches" / "master")

    assert ws.acceptance == forward.acceptance == PROJECT_ROOT / "acceptance"
    assert ONE_MODULE in source_files(ws.acceptance)


def test_install_copies_the_suite_with_package_markers_as_ignored_files(synthetic, suite):
    tree = synthetic.tree

    installed = install_acceptance(tree, suite)

    assert installed == ["tests/tests_fabric/test_fabric_accept.py", "tests/tests_pytorch/core/test_accept.py"]
    assert (tree / "tests/tests_pytorch/helpers/accept_helpers.py").read_text() == "HELPER = 1\n"
    for marker in ("tests_pytorch", "tests_pytorch/core", "tests_pytorch/helpers", "tests_fabric"):
        assert (tree / "tests" / marker / "__init__.py").is_file()
    assert not (tree / "tests/README.md").exists()
    assert uncommitted_files(tree) == []  # never "local changes" of the tree
    before = {path: path.stat().st_mtime_ns for path in (tree / "tests").rglob("*")}
    install_acceptance(tree, suite)
    assert {path: path.stat().st_mtime_ns for path in (tree / "tests").rglob("*")} == before  # nothing to do again


def test_a_file_removed_from_the_suite_is_removed_from_the_tree(synthetic, suite):
    tree = synthetic.tree
    install_acceptance(tree, suite)
    (suite / "tests_fabric/test_fabric_accept.py").unlink()

    install_acceptance(tree, suite)

    assert not (tree / "tests/tests_fabric").exists()  # its package marker went with it
    assert "/tests/tests_fabric/test_fabric_accept.py" not in git_path(tree, "info/exclude").read_text()
    assert (tree / "tests/tests_pytorch/core/test_accept.py").is_file()
    assert uncommitted_files(tree) == []


def test_a_tracked_file_is_never_overwritten_and_nothing_is_copied(synthetic, suite):
    tree = synthetic.tree  # the series adds tests/tests_pytorch/core/test_answer.py
    _suite(suite, {"tests_pytorch/core/test_answer.py": "def test_other():\n    pass\n"})

    with pytest.raises(SeriesError, match=r"core/test_answer.py is in the way .*: the tree tracks it"):
        install_acceptance(tree, suite)

    assert "answer() == 42" in (tree / "tests/tests_pytorch/core/test_answer.py").read_text()
    assert not (tree / "tests/tests_pytorch/core/test_accept.py").exists()


def test_a_file_the_tool_did_not_write_or_that_changed_since_is_refused(synthetic, suite):
    tree = synthetic.tree
    mine = tree / "tests/tests_fabric/test_fabric_accept.py"
    mine.parent.mkdir(parents=True)
    mine.write_text("# someone's work\n")

    with pytest.raises(SeriesError, match="test_fabric_accept.py is in the way .* patchseries did not write it"):
        install_acceptance(tree, suite)
    assert mine.read_text() == "# someone's work\n"

    mine.unlink()
    install_acceptance(tree, suite)
    mine.write_text("# edited in the tree\n")
    (suite / "tests_fabric/test_fabric_accept.py").write_text("def test_changed():\n    pass\n")
    with pytest.raises(SeriesError, match="test_fabric_accept.py is in the way .* or it changed since"):
        install_acceptance(tree, suite)
    assert mine.read_text() == "# edited in the tree\n"
    (suite / "tests_fabric/test_fabric_accept.py").unlink()  # a copy whose source is gone is removed, unless changed
    with pytest.raises(SeriesError, match="test_fabric_accept.py is in the way .* or it changed since"):
        install_acceptance(tree, suite)
    assert mine.read_text() == "# edited in the tree\n"


def test_main_job_runs_the_suite_beside_the_patches_tests_and_counts_each(synthetic, suite, monkeypatch):
    env = Environment(Path(sys.prefix), "2.13.0")  # the interpreter running this suite has pytest
    monkeypatch.setattr(job, "ensure_environment", lambda *args, **kwargs: env)
    # the synthetic library is not installed: put the tree's src/ on the path
    monkeypatch.setattr(
        job, "run_tests", lambda e, tree, *args: runner.run_tests(e, tree, *args, source_override=tree / "src")
    )

    result = job.run_main_job(synthetic.ws, BaseChoice(), "2.13.0", quiet)
    again = job.run_main_job(synthetic.ws, BaseChoice(), "2.13.0", quiet)

    text = job.summary(result)
    assert "tests:     3 passed, 0 failed, 0 skipped (acceptance suite: 2, patches' tests: 1)" in text
    assert text.endswith("result:    OK")
    assert again.prepared.applied.reused  # the copy does not make the tree count as changed
    assert "local changes" not in job.summary(again)


def test_patch_test_modules_are_those_the_series_adds_or_changes_that_the_tree_has(synthetic):
    prepared = prepare(synthetic.ws, BaseChoice(), quiet)

    assert prepared.test_groups()["patches' tests"] == ["tests/tests_pytorch/core/test_answer.py"]
    git(prepared.base.path, "rm", "-q", "tests/tests_pytorch/core/test_answer.py")  # an upstream module the sdist lacks
    assert prepared.test_groups()["patches' tests"] == []


def test_cases_are_counted_per_group_with_classes_and_import_errors(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests_pytorch.core.test_a" name="test_1"/>'
        '<testcase classname="tests_pytorch.core.test_a.TestX" name="test_2"><failure message="x"/></testcase>'
        '<testcase classname="tests_pytorch.core.test_a" name="test_3"><skipped message="no"/></testcase>'
        '<testcase classname="" name="tests_fabric.test_b"><error message="import"/></testcase>'
        '<testcase classname="tests_pytorch.core.test_ab" name="test_4"/>'
        "</testsuite></testsuites>"
    )
    groups = {
        "acceptance suite": ["tests/tests_pytorch/core/test_a.py"],
        "patches' tests": ["tests/tests_fabric/test_b.py"],
    }

    assert ran_per_group(junit, groups) == {"acceptance suite": 2, "patches' tests": 1}


def test_the_matrix_runs_the_suite_on_both_sides(synthetic, suite):
    from patchseries import matrix

    prepared = prepare(synthetic.ws, BaseChoice(), quiet)
    before = matrix._tree_without_series(synthetic.ws, prepared)

    assert prepared.test_modules() == [
        "tests/tests_fabric/test_fabric_accept.py",
        "tests/tests_pytorch/core/test_accept.py",
        "tests/tests_pytorch/core/test_answer.py",
    ]
    for module in prepared.test_modules():
        assert (before / module).is_file()
    assert "return 41" in (before / "src/fakelib/core.py").read_text()  # the base, without the series


def test_a_harness_file_someone_changed_is_refused_not_overwritten(synthetic):
    tree, patches = synthetic.tree, read_series(synthetic.ws.series_file)
    write_harness(tree, patches)
    runif = tree / "tests/tests_pytorch/helpers/runif.py"
    runif.write_text("# mine\n")

    with pytest.raises(SeriesError, match="runif.py is in the way .* or it changed since"):
        write_harness(tree, patches)
    assert runif.read_text() == "# mine\n"
