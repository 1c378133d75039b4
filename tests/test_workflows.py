"""The GitHub Actions workflows are valid and pass a security audit (both offline tools from PyPI)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from patchseries.paths import PROJECT_ROOT

WORKFLOWS = sorted((PROJECT_ROOT / ".github" / "workflows").glob("*.yml"))


def _tool(name: str) -> str:
    """A console script of the interpreter running the tests (the tool environment), never one found on PATH.

    A tool found on PATH only because someone installed it by hand would hide a missing install step, so a missing
    one fails loudly instead.
    """
    path = Path(sysconfig.get_path("scripts")) / name
    if not path.is_file():
        pytest.fail(f"{name} is not installed next to {sys.executable}; scripts/run_tests.sh installs it (dev extras)")
    return str(path)


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_the_github_schema(workflow):
    proc = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflows_have_no_medium_or_higher_audit_finding():
    proc = subprocess.run(
        [_tool("zizmor"), "--offline", "--min-severity", "medium", *map(str, WORKFLOWS)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_third_party_actions_are_pinned_by_commit():
    for workflow in WORKFLOWS:
        for line in workflow.read_text().splitlines():
            if "uses:" in line:
                ref = line.split("uses:", 1)[1].split("#", 1)[0].strip()
                assert len(ref.split("@", 1)[1]) == 40, f"{workflow.name}: {ref} is not pinned by commit"


@pytest.mark.parametrize("name", ["check-jsonschema", "zizmor", "ruff", "mypy"])
def test_external_tools_come_from_the_tool_environment(name):
    """The suite runs the tools the bootstrap installed, whatever else the machine has on PATH."""
    assert Path(_tool(name)).parent == Path(sys.executable).parent
