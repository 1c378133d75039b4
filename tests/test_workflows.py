"""The GitHub Actions workflows are valid and pass a security audit (both offline tools from PyPI)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from patchseries.paths import PROJECT_ROOT

WORKFLOWS = sorted((PROJECT_ROOT / ".github" / "workflows").glob("*.yml"))


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; install the project with its dev extras")
    return path


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
