"""`forward`: the release series re-made onto an upstream commit, CHANGELOG entries re-placed, DEP-3 trailers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import cli, commit, git
from patchseries.export import drift_report
from patchseries.forward import forward_message
from patchseries.series import read_series

MASTER_CHANGELOG = (
    "# Changelog\n\n## [unreleased] - YYYY-MM-DD\n\n### Added\n\n- Added a feature upstream\n\n### Fixed\n\n-\n\n"
    "---\n\n## [1.0] - 2026-01-01\n\n### Fixed\n\n- Fixed the release\n"
)
FIX = {
    "src/fakelib/core.py": "def answer():\n    return 42\n",
    "tests/tests_pytorch/core/test_answer.py": "from fakelib.core import answer\n\n\ndef test_answer():\n"
    "    assert answer() == 42\n",
}


@pytest.fixture
def master(synthetic, upstream_clone) -> Path:
    """Upstream after the release: the first patch of the series merged as is, a new CHANGELOG layout."""
    git(upstream_clone, "checkout", "-q", "-B", "master")
    commit(upstream_clone, FIX, "Fix the answer")  # the series' first patch, upstream
    commit(upstream_clone, {"src/fakelib/CHANGELOG.md": MASTER_CHANGELOG, "src/fakelib/extra.py": "X = 1\n"}, "Grow")
    # a third patch in the release series: code and a CHANGELOG entry under "### Fixed"
    series = synthetic.tree
    changelog = (
        (series / "src/fakelib/CHANGELOG.md")
        .read_text()
        .replace("- Fixed the answer\n", "- Fixed the answer\n\n- Fixed the version\n")
    )
    commit(series, {"src/fakelib/__init__.py": "VERSION = '1.0.1'\n", "src/fakelib/CHANGELOG.md": changelog},
           "Fix the version\n\nUpstream-Status: Pending [not yet submitted]\nBug: none filed upstream")  # fmt: skip
    from patchseries.export import export_series

    export_series(series, synthetic.ws.patches, branch="series")
    forward_dir = synthetic.ws.patches / "master"
    forward_dir.mkdir()
    head = git(upstream_clone, "rev-parse", "HEAD")
    (forward_dir / "base.toml").write_text(
        '[base]\nname = "fakelib"\nversion = "master"\ngit_url = "https://git.invalid/fakelib.git"\n'
        f'commit = "{head}"\n'
    )
    return upstream_clone


def test_forward_carries_what_upstream_lacks_with_entries_under_their_heading(synthetic, master):
    proc = synthetic.run("forward", "--checkout", str(master))

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"0001-Fix-the-answer.patch +already upstream", proc.stdout)
    forward_dir = synthetic.ws.patches / "master"
    names = [p.name for p in read_series(forward_dir / "series")]
    assert names == ["0001-Add-a-CHANGELOG-entry.patch", "0002-Fix-the-version.patch"]
    clone = master.parent / "applied"
    git(master.parent, "clone", "-q", str(master), str(clone))
    git(clone, "am", *(str(forward_dir / n) for n in names))
    changelog = (clone / "src/fakelib/CHANGELOG.md").read_text()
    unreleased = changelog.split("---")[0]
    assert "### Fixed\n\n- Fixed the answer\n\n- Fixed the version\n\n" in unreleased  # the placeholder replaced
    assert "- Added a feature upstream" in unreleased
    assert (clone / "src/fakelib/__init__.py").read_text() == "VERSION = '1.0.1'\n"
    version_patch = (forward_dir / names[1]).read_text()
    assert "Forwarded: no" in version_patch
    assert "Upstream-Status" not in version_patch
    assert "Bug: none" not in version_patch


def test_forward_series_passes_its_drift_check_on_the_pinned_commit(synthetic, master):
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    forward_dir = synthetic.ws.patches / "master"
    head = git(master, "rev-parse", "HEAD")

    report = drift_report(master, read_series(forward_dir / "series"), forward_dir, base=head)

    assert report.problems == []
    check = synthetic.run("check", "--checkout", str(master))
    assert "master/ (onto" in check.stdout, check.stdout + check.stderr
    assert check.stdout.count("ok: ") == 2


def test_forward_with_a_conflict_names_the_file_and_writes_nothing(synthetic, master):
    commit(master, {"src/fakelib/__init__.py": "VERSION = '2.0.dev'\n"}, "Start 2.0")
    forward_dir = synthetic.ws.patches / "master"
    toml = (forward_dir / "base.toml").read_text()
    head = git(master, "rev-parse", "HEAD")
    (forward_dir / "base.toml").write_text(toml.split("commit = ")[0] + f'commit = "{head}"\n')

    proc = synthetic.run("forward", "--checkout", str(master))

    assert proc.returncode == 1
    assert "0003-Fix-the-version.patch" in proc.stdout
    assert "conflicts (src/fakelib/__init__.py)" in proc.stdout
    assert sorted(p.name for p in forward_dir.iterdir()) == ["base.toml"]


def test_forward_message_uses_dep3_trailers():
    message = "Fix it\n\nBody.\n\nUpstream-Status: Pending [not yet submitted]\nBug: https://x.invalid/1\n"

    assert forward_message(message) == "Fix it\n\nBody.\n\nForwarded: no\nBug: https://x.invalid/1\n"
    assert "Bug" not in forward_message("Fix it\n\nUpstream-Status: Pending\nBug: none filed upstream\n")


def test_a_series_pinned_to_a_commit_refuses_the_sdist_and_applies_on_a_checkout(synthetic, master):
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    forward = ("--patches", str(synthetic.ws.patches / "master"), "--workdir", str(synthetic.ws.workdir))

    on_sdist = cli("apply", *forward)
    on_checkout = cli("apply", *forward, "--checkout", str(master))

    assert on_sdist.returncode == 2
    assert "pinned to upstream commit" in on_sdist.stderr
    assert "--checkout PATH" in on_sdist.stderr
    assert on_checkout.returncode == 0, on_checkout.stdout + on_checkout.stderr
    assert "applied 0002-Fix-the-version.patch" in on_checkout.stdout + on_checkout.stderr
