"""The GitHub configuration is valid and passes a security audit (both offline tools from PyPI), and the workflow
tests what the project claims: the tool's suite, every torch release of the matrix, Codecov's expected uploads."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from patchseries.matrix import DEFAULT_VERSIONS
from patchseries.paths import PROJECT_ROOT

GITHUB = PROJECT_ROOT / ".github"
WORKFLOWS = sorted((GITHUB / "workflows").glob("*.yml"))
SERIES = GITHUB / "workflows" / "series.yml"
WORKFLOW_SCHEMAS = ("vendor.github-workflows", "custom.github-workflows-require-timeout")
SCHEMAS = [
    *((workflow, schema) for workflow in WORKFLOWS for schema in WORKFLOW_SCHEMAS),
    (GITHUB / "dependabot.yml", "vendor.dependabot"),
    (PROJECT_ROOT / ".codecov.yml", "vendor.codecov"),
]


def _load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def _tool(name: str) -> str:
    """A console script of the interpreter running the tests (the tool environment), never one found on PATH.

    A tool found on PATH only because someone installed it by hand would hide a missing install step, so a missing
    one fails loudly instead.
    """
    path = Path(sysconfig.get_path("scripts")) / name
    if not path.is_file():
        pytest.fail(f"{name} is not installed next to {sys.executable}; scripts/run_tests.sh installs it (dev extras)")
    return str(path)


@pytest.mark.parametrize(("path", "schema"), SCHEMAS, ids=lambda v: v.name if isinstance(v, Path) else v)
def test_configuration_matches_its_schema(path, schema):
    """Workflows (and a timeout on every job), Dependabot and Codecov, with check-jsonschema's bundled schemas."""
    proc = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", schema, str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("persona", ["regular", "auditor"])
def test_github_configuration_has_no_medium_or_higher_audit_finding(persona):
    """zizmor over the workflows and the Dependabot configuration; the auditor persona adds the stricter audits."""
    proc = subprocess.run(
        [_tool("zizmor"), "--offline", "--persona", persona, "--min-severity", "medium", str(GITHUB)],
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


def _jobs() -> dict[str, Any]:
    jobs: dict[str, Any] = _load(SERIES)["jobs"]
    return jobs


def _matrix_size(job: dict[str, Any]) -> int:
    matrix = job.get("strategy", {}).get("matrix")
    if not matrix:
        return 1
    axes = [values for key, values in matrix.items() if key != "include"]
    size = 1
    for values in axes:
        size *= len(values)
    return size + len(matrix.get("include", []))


def test_workflow_runs_the_tools_own_suite_and_every_torch_release_of_the_matrix():
    jobs = _jobs()
    assert any("scripts/run_tests.sh" in step.get("run", "") for job in jobs.values() for step in job["steps"])
    matrix = jobs["test"]["strategy"]["matrix"]
    assert tuple(matrix["torch"]) == DEFAULT_VERSIONS
    extra = {(entry["torch"], entry["python"]) for entry in matrix["include"]}
    assert {torch for torch, _ in extra} == {DEFAULT_VERSIONS[0], DEFAULT_VERSIONS[-1]}
    # .ci/run (on every stop, under 30 minutes) runs the suite, whose main job uses the default torch
    assert "bash scripts/run_tests.sh\n" in (PROJECT_ROOT / ".ci" / "run").read_text()


def test_only_pull_requests_cancel_runs_in_progress():
    assert _load(SERIES)["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"


def test_secrets_are_read_only_by_codecov_steps_of_jobs_with_an_environment():
    workflow = _load(SERIES)
    assert "secrets." not in str(workflow.get("env", {}))
    for name, job in workflow["jobs"].items():
        assert "secrets." not in str(job.get("env", {})), name
        for step in job["steps"]:
            if "secrets." in str(step):
                assert step["uses"].startswith("codecov/codecov-action@"), f"{name}: {step.get('name')}"
                assert "secrets." not in str(step.get("env", {})) + step.get("run", "")
                assert job["environment"]["name"] == "codecov"


def test_codecov_waits_for_every_coverage_upload_and_has_a_patch_target():
    uploads = 0
    for job in _jobs().values():
        for step in job["steps"]:
            uses, inputs = step.get("uses", ""), step.get("with", {})
            if uses.startswith("codecov/codecov-action@") and inputs.get("report_type", "coverage") == "coverage":
                assert step["if"] == "${{ !cancelled() }}"  # failed tests are uploaded too
                uploads += _matrix_size(job)
    config = _load(PROJECT_ROOT / ".codecov.yml")
    assert config["codecov"]["notify"]["after_n_builds"] == uploads
    assert config["comment"]["after_n_builds"] == uploads
    assert float(config["coverage"]["status"]["patch"]["default"]["target"].rstrip("%")) >= 95


def test_reports_are_kept_as_artifacts_even_when_tests_fail():
    for name, job in _jobs().items():
        runs_tests = any(s.get("run", "").startswith(("scripts/run_tests.sh", "scripts/apply_and_test.sh"))
                         for s in job["steps"])  # fmt: skip
        if runs_tests:
            kept = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
            assert kept, name
            assert kept[0]["if"] == "${{ !cancelled() }}"


def test_the_release_wheels_are_built_and_tested_installed_on_every_torch_release_of_the_matrix():
    job = _jobs()["wheels"]
    assert job["strategy"]["matrix"]["torch"] == list(DEFAULT_VERSIONS)
    runs = [step.get("run", "") for step in job["steps"]]
    assert "scripts/build_wheels.sh" in runs
    assert any(run.startswith('scripts/test_wheels.sh --torch "$TORCH"') for run in runs)
    ci_run = (PROJECT_ROOT / ".ci" / "run").read_text()
    assert "bash scripts/build_wheels.sh\n" in ci_run
    assert f"scripts/test_wheels.sh --torch {DEFAULT_VERSIONS[0]}\n" in ci_run  # lightning and pytorch_lightning
