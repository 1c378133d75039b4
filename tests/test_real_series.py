"""The real series in patches/: faithful to its branch, applicable with plain `git am`, and it passes its tests.

These need the pinned sdist from PyPI (downloaded once into the default work directory and verified by sha256).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from patchseries.export import drift_report, is_placeholder
from patchseries.forward import DEP3_KEYS, changelog_entries
from patchseries.paths import PROJECT_ROOT, Workspace
from patchseries.pin import load_pin
from patchseries.progress import quiet
from patchseries.series import read_series
from patchseries.trees import resolve_source, tool_tree

pytestmark = pytest.mark.network
WS = Workspace.default()
REQUIRED_TRAILERS = ("Upstream-Status", "Bug")
MAX_SUBJECT = 72  # upstream's (and git's) limit for a pull request's title
MAX_CHANGELOG_ENTRY = 240  # one sentence, as upstream's entries (90th percentile 214 characters)


@pytest.fixture(scope="module")
def base_repo() -> Path:
    """The tool's tree on the sdist base (branch ``base``), made as the main job makes it."""
    pin = load_pin(WS.pin_file)
    WS.workdir.mkdir(parents=True, exist_ok=True)
    return tool_tree(WS, pin, read_series(WS.series_file), resolve_source(WS, pin, None, False, False), quiet)[0].path


def test_patches_equal_a_fresh_export_and_have_no_whitespace_errors(base_repo, tmp_path):
    lacks = load_pin(WS.pin_file).sdist_lacks
    assert drift_report(base_repo, read_series(WS.series_file), WS.patches, tmp_path, lacks=lacks).problems == []


def test_git_am_applies_the_series_to_the_sdist_base_less_the_files_it_lacks(base_repo, tmp_path):
    """Plain `git am` onto the sdist base, excluding the upstream docs and test files the sdist does not ship (as the
    tool does); plain `git am` onto upstream's tag itself is the workflow's `git-am` job, which needs GitHub."""
    clone = tmp_path / "lightning"
    subprocess.run(["git", "clone", "-q", "--branch", "base", str(base_repo), str(clone)], check=True)
    patches = read_series(WS.series_file)
    lacks = load_pin(WS.pin_file).sdist_lacks
    excludes = sorted({path for p in patches for path in p.touched_existing if path.startswith(lacks)})
    assert "docs/source-pytorch/model/manual_optimization.rst" in excludes  # the series carries upstream's docs

    proc = subprocess.run(
        ["git", "-c", "user.name=Maintainer", "-c", "user.email=m@invalid", "am",
         *(f"--exclude={path}" for path in excludes), *(str(p.path) for p in patches)],
        cwd=clone, capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = subprocess.run(["git", "log", "--format=%s", "origin/base..HEAD"], cwd=clone, capture_output=True, text=True)
    assert len(log.stdout.splitlines()) == len(patches)


@pytest.mark.parametrize("patch", read_series(WS.series_file), ids=lambda p: p.name[:4])
def test_every_patch_says_where_it_stands_upstream(patch):
    keys = [key for key, _ in patch.trailers]
    missing = [key for key in REQUIRED_TRAILERS if key not in keys]
    assert not missing, f"{patch.name} lacks the trailers {missing}"
    if "Backport" in dict(patch.trailers)["Upstream-Status"]:
        assert "Origin" in keys


@pytest.mark.parametrize("patch", read_series(WS.series_file), ids=lambda p: p.name[:4])
def test_every_source_change_has_a_lightning_changelog_entry(patch):
    touched = [c.path for c in patch.changes]
    for package in ("pytorch", "fabric"):
        if any(p.startswith(f"src/lightning/{package}/") and p.endswith(".py") for p in touched):
            assert f"src/lightning/{package}/CHANGELOG.md" in touched, f"{patch.name} has no CHANGELOG entry"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a fresh machine downloads torch first
def test_main_job_passes_on_the_default_torch():
    """The README's main command, end to end: base, series, environment, the series' tests, summary."""
    proc = subprocess.run(
        [sys.executable, "-m", "patchseries", "test"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False
    )

    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "result:    OK" in proc.stdout
    assert " 0 failed" in proc.stdout
    assert "  coverage:  changed lines: " in proc.stdout


FORWARD = WS.patches / "master"


def test_forward_series_is_pinned_to_a_full_upstream_commit():
    pin = load_pin(FORWARD / "base.toml")

    assert len(pin.commit) == 40
    assert not pin.sdist_url


@pytest.mark.parametrize("patch", read_series(FORWARD / "series"), ids=lambda p: p.name[:4])
def test_no_forward_patch_carries_dep3_trailers(patch):
    """The forward patches are pull requests: upstream's commits carry no DEP-3 trailers (the release series does)."""
    dep3 = [key for key, _ in patch.trailers if key in DEP3_KEYS or key.startswith("Bug-")]
    assert not dep3, f"{patch.name} has the DEP-3 trailers {dep3}"


@pytest.mark.parametrize("patch", read_series(FORWARD / "series"), ids=lambda p: p.name[:4])
def test_every_forward_subject_fits_a_pull_request_title(patch):
    assert len(patch.subject) <= MAX_SUBJECT, f"{patch.name}: {len(patch.subject)} characters: {patch.subject}"


SERIES_PATCHES = [*read_series(WS.series_file), *read_series(FORWARD / "series")]


def _series_id(patch) -> str:
    return f"{'master-' if patch.path.parent == FORWARD else ''}{patch.name[:4]}"


RELEASE_BY_SUBJECT = {patch.subject: patch for patch in read_series(WS.series_file)}
VERBS = tuple(f"- {verb} " for verb in ("Added", "Changed", "Deprecated", "Removed", "Fixed"))


@pytest.mark.parametrize("patch", SERIES_PATCHES, ids=_series_id)
def test_every_changelog_entry_is_one_short_line_in_upstreams_style(patch):
    """As upstream writes them: one line, one sentence of at most 240 characters, a verb first, and the link of the
    issue the change fixes (the release patch's ``Bug:``), or none where no issue exists: the pull request's number
    goes there once it is opened. A backport's entry is upstream's own text, and is left as it is.
    """
    trailers = dict(RELEASE_BY_SUBJECT[patch.subject].trailers)
    if "Backport" in trailers["Upstream-Status"]:
        pytest.skip("a backport carries upstream's own entry")
    entries = [text for _, _, text in changelog_entries(patch.path.read_text())[0]]
    for entry in entries:
        assert "\n" not in entry, f"{patch.name}: an entry of more than one line: {entry[:80]}..."
        assert len(entry) <= MAX_CHANGELOG_ENTRY, f"{patch.name}: {len(entry)} characters: {entry[:80]}..."
        assert entry.startswith(VERBS), f"{patch.name}: no verb first: {entry[:80]}..."
        assert "broken since" not in entry, f"{patch.name}: {entry[:80]}..."
        linked = "(https://" in entry
        assert linked == trailers["Bug"].startswith("https://"), f"{patch.name}: Bug: {trailers['Bug']}; {entry[:80]}"


@pytest.mark.parametrize("patch", SERIES_PATCHES, ids=_series_id)
def test_no_patch_has_a_placeholder_author(patch):
    author = next((line for line in patch.path.read_text().splitlines() if line.startswith("From: ")), "")
    assert author
    assert not is_placeholder(author), f"{patch.name}: {author}"


@pytest.mark.parametrize("patch", read_series(FORWARD / "series"), ids=lambda p: p.name[:4])
def test_every_forward_patch_has_a_changelog_entry(patch):
    touched = [c.path for c in patch.changes]
    for package in ("pytorch", "fabric"):
        if any(p.startswith(f"src/lightning/{package}/") and p.endswith(".py") for p in touched):
            assert f"src/lightning/{package}/CHANGELOG.md" in touched, f"{patch.name} has no CHANGELOG entry"
