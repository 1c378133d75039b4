"""`check --onto REF`: each patch is reported as already upstream, applying cleanly, or conflicting."""

from __future__ import annotations

import os
import shutil

from conftest import cli, commit, git
from patchseries.onto import check_onto
from patchseries.series import read_series

CORE = "src/fakelib/core.py"


def test_each_patch_is_placed_against_an_upstream_ref(synthetic):
    tree = synthetic.tree
    git(tree, "checkout", "-q", "-b", "master", "base")
    # upstream merged the fix under another message, and rewrote the CHANGELOG line the second patch edits
    commit(tree, {"src/fakelib/core.py": "def answer():\n    return 42\n",
                  "tests/tests_pytorch/core/test_answer.py": "from fakelib.core import answer\n\n\n"
                  "def test_answer():\n    assert answer() == 42\n"}, "Merged upstream as #1")  # fmt: skip
    commit(tree, {"src/fakelib/CHANGELOG.md": "# Changelog\n\n## [unreleased]\n\n### Fixed\n\n- Something else\n"}, "x")

    standings = check_onto(tree, "master", "base", read_series(synthetic.ws.series_file))

    assert [(s.status, s.detail) for s in standings] == [
        ("already upstream", f"same patch id as {git(tree, 'rev-parse', 'master~1')[:12]}"),
        ("conflicts", "src/fakelib/CHANGELOG.md"),
    ]
    assert git(tree, "status", "--porcelain") == ""  # the upstream repository is only read


def test_patch_that_applies_is_reported_clean(synthetic):
    git(synthetic.tree, "branch", "master", "base")

    standings = check_onto(synthetic.tree, "master", "base", read_series(synthetic.ws.series_file))

    assert [s.status for s in standings] == ["applies cleanly", "applies cleanly"]


def test_check_onto_judges_each_patch_on_its_own_when_git_am_abort_fails(synthetic, upstream_clone, tmp_path):
    git(upstream_clone, "checkout", "-q", "-b", "next")
    commit(upstream_clone, {CORE: "def answer():\n    return 40\n"}, "Upstream changed the answer")  # 0001 conflicts
    real = shutil.which("git")
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    # a git whose `am --abort` fails and changes nothing (as when an object it needs is missing)
    wrapper.write_text(f"""#!/bin/sh
am=
for arg in "$@"; do
  [ "$arg" = am ] && am=1
  if [ -n "$am" ] && [ "$arg" = --abort ]; then echo 'error: simulated' >&2; exit 128; fi
done
exec '{real}' "$@"
""")
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}"}
    options = ("--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir))

    proc = cli("check", "--onto", "next", "--checkout", str(upstream_clone), *options, env=env)

    assert "previous rebase directory" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[1:] == ["conflicts", f"({CORE})"], proc.stdout + proc.stderr
    assert lines[1].split()[1:] == ["applies", "cleanly"], proc.stdout + proc.stderr
    assert proc.returncode == 1
