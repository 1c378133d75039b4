"""`forward` (the release series re-made onto an upstream commit, CHANGELOG entries re-placed, no DEP-3 trailers) and
`check --onto REF` (each patch reported as already upstream, applying cleanly, or conflicting)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import TOOL, between, cli, commit, files_of, git, one_error, shell
from patchseries.errors import SeriesError
from patchseries.export import drift_report, export_series
from patchseries.forward import add_entry, changelog_entries, check_onto, forward_message, forward_series
from patchseries.interrupts import SIGNAL_AT_ENV
from patchseries.lock import series_lock
from patchseries.pin import load_pin
from patchseries.series import read_series
from patchseries.trees import fetch_advice

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


def _forward_after(synthetic, master, files: dict[str, str], message: str) -> subprocess.CompletedProcess[str]:
    """`forward` once the release series has one more patch: a commit of ``files`` with ``message``, exported."""
    commit(synthetic.tree, files, message)
    from patchseries.export import export_series

    export_series(synthetic.tree, synthetic.ws.patches, branch="series")
    return synthetic.run("forward", "--checkout", str(master))


def _pin_master_to_head(synthetic, master) -> None:
    pin = synthetic.ws.patches / "master" / "base.toml"
    pin.write_text(re.sub(r'commit = "\w+"', f'commit = "{git(master, "rev-parse", "HEAD")}"', pin.read_text()))


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
    for key in ("Forwarded:", "Upstream-Status:", "Bug:"):
        assert key not in version_patch
    assert "From: Test Author <author@example.com>" in version_patch  # the commits' own author by default


def test_already_upstream_is_what_the_tree_holds_modes_and_three_way_merges_included(synthetic, master):
    """A patch upstream took with a line near it changed is upstream (git am --3way: no changes); a mode change or a
    file named like a CHANGELOG that upstream lacks is not."""
    commit(master, {"src/fakelib/core.py": '"""The answer."""\ndef answer():\n    return 42\n'}, "Document it")
    _pin_master_to_head(synthetic, master)
    (synthetic.tree / "src/fakelib/core.py").chmod(0o755)
    git(synthetic.tree, "commit", "-q", "-am", "Make core.py runnable\n\nUpstream-Status: Pending")
    notes = {"src/fakelib/MIGRATION-CHANGELOG.md": "# Notes\n"}
    proc = _forward_after(synthetic, master, notes, "Add notes\n\nUpstream-Status: Pending")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"0001-Fix-the-answer.patch +already upstream \(git am --3way finds its changes", proc.stdout)
    names = [p.name for p in read_series(synthetic.ws.patches / "master" / "series")]
    assert names == [
        "0001-Add-a-CHANGELOG-entry.patch",
        "0002-Fix-the-version.patch",
        "0003-Make-core.py-runnable.patch",
        "0004-Add-notes.patch",
    ]
    assert "Fixed the answer" in (synthetic.ws.patches / "master" / names[0]).read_text()  # its own entry only


def test_forward_series_passes_its_drift_check_on_the_pinned_commit(synthetic, master, tmp_path):
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    forward_dir = synthetic.ws.patches / "master"
    head = git(master, "rev-parse", "HEAD")

    report = drift_report(master, read_series(forward_dir / "series"), forward_dir, tmp_path, base=head)

    assert report.problems == []
    check = synthetic.run("check", "--checkout", str(master))
    assert "master/ (onto" in check.stdout, check.stdout + check.stderr
    assert check.stdout.count("ok: ") == 3  # the release series, master/, and master/ is what forward writes


def test_forward_series_with_relative_paths_from_another_directory_writes_the_forward_folder(
    synthetic, master, tmp_path, monkeypatch
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    patches = Path("../patches")
    release_patches = read_series(patches / "series")

    results = forward_series(
        Path("..", master.name), load_pin(patches / "base.toml"), release_patches,
        load_pin(patches / "master/base.toml"), patches / "master", tmp_path / "scratch",
    )  # fmt: skip

    assert [r.status for r in results] == ["already upstream", "forwarded", "forwarded"]
    names = [p.name for p in read_series(synthetic.ws.patches / "master/series")]
    assert names == ["0001-Add-a-CHANGELOG-entry.patch", "0002-Fix-the-version.patch"]
    assert list(elsewhere.iterdir()) == []


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


def test_forward_message_drops_dep3_trailers_and_keeps_the_rest():
    message = "Fix it\n\nBody.\n\nUpstream-Status: Pending [not yet submitted]\nBug: https://x.invalid/1\n"
    mixed = "Fix it\n\nBody.\n\nOrigin: upstream, abc\nForwarded: no\nBug-Debian: 1\nSigned-off-by: A <a@example.com>\n"
    folded = "Fix it\n\nBody.\n\nDescription: a fix,\n over two lines\nupstream-status: Pending\nAcked-by: B <b@x.c>\n"

    assert forward_message(message) == "Fix it\n\nBody.\n"
    assert forward_message(folded) == "Fix it\n\nBody.\n\nAcked-by: B <b@x.c>\n"
    kept = "Bug-for-bug compatible with 2.5: the old order.\nSigned-off-by: A <a@b.c>\n"  # prose git reads as no key
    assert forward_message(f"Fix it\n\nBody.\n\nBug: 1\n{kept}") == f"Fix it\n\nBody.\n\n{kept}"
    with pytest.raises(SeriesError, match="git reads DEP-3 trailers in 'Fix it' once they go; reword it"):
        forward_message("Fix it\n\nBug: see below\n\nUpstream-Status: Pending\n")  # the body would read as them
    assert (
        forward_message("Fix it\n\nBody.\n\nStatus: 3 pass\rBug: flaky\n")
        == "Fix it\n\nBody.\n\nStatus: 3 pass\rBug: flaky\n"
    )
    assert forward_message(mixed) == "Fix it\n\nBody.\n\nSigned-off-by: A <a@example.com>\n"
    # a last paragraph that is not a trailer block is body text, kept as it is
    assert (
        forward_message("Fix it\n\nNote: the bug is old.\nSee above.\n")
        == "Fix it\n\nNote: the bug is old.\nSee above.\n"
    )


def test_forward_keeps_the_files_of_the_forward_folder_it_did_not_write(synthetic, master):
    forward_dir = synthetic.ws.patches / "master"
    (forward_dir / "drafts").mkdir()
    (forward_dir / "drafts" / "fabric-unwrap-issue.md").write_text("# Draft issue\n")
    (forward_dir / "NOTES.md").write_text("notes\n")

    for _ in range(2):  # a second run replaces its own patches, and only those
        assert synthetic.run("forward", "--checkout", str(master)).returncode == 0

    assert (forward_dir / "drafts" / "fabric-unwrap-issue.md").read_text() == "# Draft issue\n"
    assert (forward_dir / "NOTES.md").read_text() == "notes\n"


def test_forward_keeps_a_hand_edit_and_a_patch_of_the_persons_in_the_forward_folder(synthetic, master):
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    forward_dir = synthetic.ws.patches / "master"
    edited = sorted(forward_dir.glob("0001-*.patch"))[0]
    edited.write_text(edited.read_text() + "# the reviewer asked for this\n")
    mine = forward_dir / "0009-My-own-idea.patch"
    mine.write_bytes(edited.read_bytes())
    (forward_dir / "series").write_text((forward_dir / "series").read_text() + f"{mine.name}\n")
    before = files_of(forward_dir)

    error = one_error(synthetic.run("forward", "--checkout", str(master)))

    assert edited.name in error
    assert files_of(forward_dir) == before
    assert shell(between(error, "git -C ", "`")).returncode == 0  # the remedy as printed: git holds them now
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0


def test_forward_author_option_and_environment_set_every_from_line(synthetic, master, monkeypatch):
    forward_dir = synthetic.ws.patches / "master"

    by_option = synthetic.run("forward", "--checkout", str(master), "--author", "Jane Doe <jane@example.com>")
    froms = {
        line for p in forward_dir.glob("*.patch") for line in p.read_text().splitlines() if line.startswith("From:")
    }
    monkeypatch.setenv("PATCHSERIES_AUTHOR", "Env Author <env@example.com>")
    by_env = synthetic.run("forward", "--checkout", str(master))
    env_froms = {
        line for p in forward_dir.glob("*.patch") for line in p.read_text().splitlines() if line.startswith("From:")
    }

    assert by_option.returncode == 0, by_option.stderr
    assert froms == {"From: Jane Doe <jane@example.com>"}
    assert by_env.returncode == 0, by_env.stderr
    assert env_froms == {"From: Env Author <env@example.com>"}


def test_forward_refuses_a_placeholder_author_and_writes_nothing(synthetic, master):
    forward_dir = synthetic.ws.patches / "master"

    given = synthetic.run("forward", "--checkout", str(master), "--author", "Series <series@invalid>")
    git(synthetic.tree, "commit", "-q", "--amend", "--no-edit", "--author=Series <series@invalid>")
    from patchseries.export import export_series

    export_series(synthetic.tree, synthetic.ws.patches, branch="series")
    default = synthetic.run("forward", "--checkout", str(master))

    assert given.returncode == 2
    assert given.stderr.startswith("error: --author 'Series <series@invalid>' has an @invalid placeholder address")
    assert default.returncode == 2
    assert "placeholder author Series <series@invalid>" in default.stderr
    assert sorted(p.name for p in forward_dir.iterdir()) == ["base.toml"]


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


ENTRY_PATCH = (
    "diff --git a/src/fakelib/CHANGELOG.md b/src/fakelib/CHANGELOG.md\n"
    "index 1111111..2222222 100644\n"
    "--- a/src/fakelib/CHANGELOG.md\n"
    "+++ b/src/fakelib/CHANGELOG.md\n"
    "@@ -5,3 +5,7 @@\n"
    " ### Fixed\n"
    " \n"  # a context line: the blank line under the heading
    "+- Fixed the version\n"
    "+  * for wheels too\n"
    "+\n"
    "+- Fixed the answer\n"
    " ---\n"
)


def test_an_entry_keeps_its_lines_and_paragraphs_and_other_lines_are_named():
    section = ENTRY_PATCH.split("@@ -5,3 +5,7 @@\n")[0] + "@@ -1,3 +1,11 @@\n"
    added = "+- Fixed a\n+\tacross a tab\n+\n+  a second paragraph\n+\n+* Fixed b\n+-\n+and prose\n-- Fixed c\n- \n"
    added += "+- Fixed d in\n+#21374\n+### Fixed\n-### Fxied\n"

    entries, others = changelog_entries(section + added)

    assert [entry for _, _, entry in entries] == [
        "- Fixed a\n\tacross a tab\n\n  a second paragraph",
        "* Fixed b",
        "- Fixed d in",
    ]
    path = "src/fakelib/CHANGELOG.md"
    assert others == [
        f"adds 'and prose' in {path}",
        f"removes '- Fixed c' in {path}",
        f"adds '#21374' in {path}",
        f"removes '### Fxied' in {path}",
    ]


def test_a_blank_context_line_an_editor_trimmed_is_read_as_git_apply_reads_it():
    trimmed = ENTRY_PATCH.replace("\n \n", "\n\n")  # the blank line under the heading, its space gone

    assert changelog_entries(trimmed) == changelog_entries(ENTRY_PATCH)
    assert len(changelog_entries(trimmed)[0]) == 2


def test_an_entry_keeps_its_continuation_lines():
    # post-image line indexes: the hunk starts at line 5 (index 4); "### Fixed", "", then the entries
    assert changelog_entries(ENTRY_PATCH)[0] == [
        ("src/fakelib/CHANGELOG.md", 6, "- Fixed the version\n  * for wheels too"),
        ("src/fakelib/CHANGELOG.md", 9, "- Fixed the answer"),
    ]


def _changelog(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "CHANGELOG.md"
    path.write_text(text)
    return path


def test_an_entry_goes_after_the_last_entry_block_of_its_heading(tmp_path):
    path = _changelog(tmp_path, "## [unreleased]\n\n### Fixed\n\n- Fixed a\n  * detail of a\n\n---\n\n## [1.0]\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed b\n  * detail of b")

    assert path.read_text() == (
        "## [unreleased]\n\n### Fixed\n\n- Fixed a\n  * detail of a\n\n- Fixed b\n  * detail of b\n\n---\n\n## [1.0]\n"
    )
    assert not add_entry(tmp_path, path.name, "### Fixed", "- Fixed b\n  * detail of b")  # already there


def test_entries_of_several_patches_go_to_the_end_of_their_heading_in_order(tmp_path):
    """As upstream's pull requests add theirs: each patch's entry after those of the patches before it."""
    path = _changelog(tmp_path, "## [unreleased]\n\n### Fixed\n\n- Fixed upstream\n\n---\n\n## [1.0]\n")

    for number in range(3):
        assert add_entry(tmp_path, path.name, "### Fixed", f"- Fixed by patch {number}")

    fixed = "".join(f"- Fixed by patch {number}\n\n" for number in range(3))
    assert path.read_text() == f"## [unreleased]\n\n### Fixed\n\n- Fixed upstream\n\n{fixed}---\n\n## [1.0]\n"


def test_a_missing_heading_is_added_in_keep_a_changelog_order(tmp_path):
    path = _changelog(tmp_path, "## [unreleased]\n\n### Added\n\n- Added x\n\n### Fixed\n\n- Fixed y\n\n## [1.0]\n")

    add_entry(tmp_path, path.name, "### Changed", "- Changed z")

    assert path.read_text() == (
        "## [unreleased]\n\n### Added\n\n- Added x\n\n### Changed\n\n- Changed z\n\n"
        "### Fixed\n\n- Fixed y\n\n## [1.0]\n"
    )


def test_an_empty_item_two_blank_lines_and_an_entry_read_as_one_list_on_github_are_no_refusal(tmp_path):
    """CommonMark 0.31 (markdown-it) reads two lists, GitHub's cmark-gfm one, as upstream's CHANGELOG has had: the
    same items show either way, so the two are compared by items and headings, not by their lists."""
    path = _changelog(tmp_path, "## [unreleased]\n\n### Fixed\n\n-\n\n\n- Fixed y\n\n## [1.0]\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed z")

    assert path.read_text() == "## [unreleased]\n\n### Fixed\n\n-\n\n\n- Fixed y\n\n- Fixed z\n\n## [1.0]\n"


@pytest.mark.parametrize("shown", ["### Fixed  bugs", "### Fixed ~bugs~", "### Fixed&#32;bugs"])
def test_a_heading_is_the_text_github_shows(tmp_path, shown):
    """White space collapsed, a strikethrough's marks less (GFM): the target's heading, so no second one is added."""
    path = _changelog(tmp_path, f"## [unreleased]\n\n{shown}\n\n- Fixed y\n\n## [1.0]\n")

    add_entry(tmp_path, path.name, "### Fixed bugs", "- Fixed z")

    assert path.read_text() == f"## [unreleased]\n\n{shown}\n\n- Fixed y\n\n- Fixed z\n\n## [1.0]\n"


@pytest.mark.parametrize(
    "line", ["- Fixed a\u2028b", "- Fixed a\rb", "- Fixed a"]
)  # U+2028 or a lone CR in upstream's line: no line break; the last: a file without a final newline
def test_an_entry_changes_only_the_lines_it_adds(tmp_path, line):
    text = f"## [unreleased]\n\n### Fixed\n\n{line}\n\n---\n\n## [1.0]\n\n- Fixed the release"
    path = tmp_path / "CHANGELOG.md"
    path.write_bytes(text.encode())

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed b\u2028c")

    assert path.read_bytes().decode() == text.replace(f"{line}\n", f"{line}\n\n- Fixed b\u2028c\n")


def test_forward_carries_an_entry_with_a_cr_and_the_entries_after_it(synthetic, master):
    changelog = (synthetic.tree / "src/fakelib/CHANGELOG.md").read_bytes().decode()
    more = "- Fixed the version\n\n- Fixed the bar: 50%\rdone\n\n- Fixed a second thing\n"
    commit(synthetic.tree, {"src/fakelib/CHANGELOG.md": changelog.replace("- Fixed the version\n", more)},
           "Fix two things\n\nUpstream-Status: Pending")  # fmt: skip
    from patchseries.export import export_series

    export_series(synthetic.tree, synthetic.ws.patches, branch="series")

    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    forwarded = next((synthetic.ws.patches / "master").glob("*-Fix-two-things.patch")).read_bytes()
    assert b"+- Fixed the bar: 50%\rdone\n" in forwarded
    assert b"+- Fixed a second thing\n" in forwarded


def test_a_target_without_the_changelog_or_its_unreleased_section_is_refused(tmp_path):
    """One refusal for both: the entries have nowhere to go."""
    _changelog(tmp_path, "## [1.0]\n\n### Fixed\n\n- Fixed y\n")
    for name in ("missing.md", "CHANGELOG.md"):
        with pytest.raises(SeriesError) as refused:
            add_entry(tmp_path, name, "### Fixed", "- Fixed z")
        assert str(refused.value) == (f"the target's {name} shows 0 second-level headings naming [unreleased], not "
                                      "one: pin a commit with one for the series' entries")  # fmt: skip


def test_a_commit_pin_needs_a_full_commit_id(tmp_path):
    pin = tmp_path / "base.toml"
    pin.write_text(
        '[base]\nname = "x"\nversion = "master"\ngit_url = "https://git.invalid/x.git"\ncommit = "7f0c343"\n'
    )

    with pytest.raises(SeriesError, match="full 40-hex commit id"):
        load_pin(pin)


def test_a_checkout_without_the_pinned_commit_is_refused_and_force_base_uses_head(synthetic, master):
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    forward = ("--patches", str(synthetic.ws.patches / "master"), "--workdir", str(synthetic.ws.workdir))
    toml = synthetic.ws.patches / "master" / "base.toml"
    toml.write_text(toml.read_text().split("commit = ")[0] + f'commit = "{"0" * 40}"\n')

    missing = cli("apply", *forward, "--checkout", str(master))
    forced = cli("apply", *forward, "--checkout", str(master), "--force-base")

    assert missing.returncode == 2
    assert "does not have the pinned commit 000000000000" in missing.stderr
    assert forced.returncode == 0, forced.stderr


def test_entries_with_the_same_first_line_are_two_entries(tmp_path):
    path = _changelog(tmp_path, "## [unreleased]\n\n### Fixed\n\n- Fixed a crash\n  in `answer()`\n\n## [1.0]\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash\n  in `version()`")
    assert not add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash\n  in `version()`")

    assert "- Fixed a crash\n  in `answer()`\n\n- Fixed a crash\n  in `version()`\n" in path.read_text()


def test_an_entry_that_begins_a_longer_entry_upstream_is_not_there_yet(tmp_path):
    path = _changelog(tmp_path, "## [unreleased]\n\n### Fixed\n\n- Fixed a crash\n  in `answer()`\n\n## [1.0]\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text().endswith("- Fixed a crash\n  in `answer()`\n\n- Fixed a crash\n\n## [1.0]\n")


def _unreleased_with(tmp_path: Path, upstream: str) -> tuple[Path, str]:
    text = f"## [unreleased]\n\n### Fixed\n\n{upstream}\n---\n\n## [1.0]\n"
    return _changelog(tmp_path, text), text


@pytest.mark.parametrize(
    "upstream",
    [
        "- Fixed a crash\nin `answer()` (a lazy line)\n",
        "Not taken:\n\n```\n- Fixed a crash\n```\n",  # a code block
        "- Fixed a bug\n\n ```\n- Fixed a crash\n```\n",  # a fence indented less than an item's lines
        "- Fixed a bug\n--- and more\n",  # a lazy line like a rule
    ],
)
def test_an_entry_upstream_shows_as_code_or_part_of_another_item_is_added(tmp_path, upstream):
    path, text = _unreleased_with(tmp_path, upstream)

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_bytes().decode() == text.replace(f"{upstream}\n---", f"{upstream}\n- Fixed a crash\n\n---")


@pytest.mark.parametrize(
    "upstream",
    [
        "- Fixed a crash\n> Note: not in save\n",  # a quote after a whole entry
        "- Fixed a bug\n\n---\n\n- Fixed a crash\n",  # a rule inside the section
        "- Fixed a bug\r- Fixed a crash\r",  # a lone CR ends a line for CommonMark (and GitHub)
    ],
)
def test_an_entry_upstream_shows_as_an_item_of_the_unreleased_section_is_there_already(tmp_path, upstream):
    path, text = _unreleased_with(tmp_path, upstream)

    assert not add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_bytes().decode() == text


@pytest.mark.parametrize(
    "upstream",
    [
        "-\n\n  ## [0.9]\n\n- Fixed a crash\n",  # the empty item replaced would take the heading in
        "-  Fixed a bug\n  ## [0.9]\n\n- Fixed a crash\n",  # so would an item after the bug's
        "```\n- Fixed a bug\n",  # a fence to the end of the file
    ],
)
def test_an_entry_that_would_not_read_as_one_more_item_is_refused_and_nothing_written(tmp_path, upstream):
    path, text = _unreleased_with(tmp_path, upstream)

    with pytest.raises(SeriesError, match=r"^forward cannot add '- Fixed a crash' to \[unreleased\] of the target's "
                       r"CHANGELOG.md so that CommonMark reads it as one more item under '### Fixed' and the rest as "
                       r"before \(line \d+\): pin a commit whose CHANGELOG takes it$"):  # fmt: skip
        add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_bytes().decode() == text


@pytest.mark.parametrize(
    ("above", "inside"),
    [
        ("> ## [Unreleased]\n> ### Fixed\n> - Fixed a thing\n\n", ""),  # a template in a quote above the section
        ("- ## [Unreleased]\n\n", ""),  # in a list above it
        ("", "- ### Fixed\n  Fixes go under the heading below.\n\n"),  # a reminder in an item inside it
        ("", "> ### Fixed\n> Fixes go under the heading below.\n\n"),  # in a quote inside it
    ],
)
def test_a_heading_in_a_quote_or_an_item_is_neither_the_section_nor_its_heading(tmp_path, above, inside):
    path = _changelog(tmp_path, f"# Changelog\n\n{above}## [unreleased]\n\n{inside}### Fixed\n\n- Fixed a bug\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text().endswith(f"\n## [unreleased]\n\n{inside}### Fixed\n\n- Fixed a bug\n\n- Fixed a crash\n")


@pytest.mark.parametrize(
    "shown",  # each shows "[unreleased]" as GitHub renders it
    [
        "\\[unreleased]",
        "&#91;unreleased]",
        "*[Unreleased]*",
        "[[Unreleased]](/u)",
    ],
)
def test_the_unreleased_heading_is_the_one_that_shows_so_whatever_its_source(tmp_path, shown):
    later = "## [1.0]\n\n### Fixed\n\n- Fixed a crash\n"
    text = f"\ufeff# Changelog\n\n## {shown} - YYYY\n\n### Fixed\n\n- Fixed a bug\n\n{later}"
    path = _changelog(tmp_path, text)

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text() == text.replace("- Fixed a bug\n", "- Fixed a bug\n\n- Fixed a crash\n")  # its BOM kept


@pytest.mark.parametrize("live", ["[unreleased]", '<a name="u"></a> [unreleased]', "&nbsp;[Unreleased]", "Unreleased"])
def test_two_second_level_headings_naming_unreleased_are_refused_and_nothing_written(tmp_path, live):
    """Which one is live would be a guess: a stale section left over, or a template."""
    stale = "## [unreleased] - left over\n\n### Fixed\n\n-\n"
    path = _changelog(tmp_path, text := f"## {live} - YYYY\n\n### Fixed\n\n- Fixed a bug\n\n{stale}")

    with pytest.raises(SeriesError, match=r"shows 2 second-level headings naming \[unreleased\], not one"):
        add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text() == text


def test_a_heading_broken_over_two_lines_does_not_name_unreleased(tmp_path):
    path = _changelog(tmp_path, "[Unre\\\nleased]\n---\n\n### Fixed\n\n- Fixed a bug\n")  # GitHub shows two lines

    with pytest.raises(SeriesError, match=r"shows 0 second-level headings naming \[unreleased\], not one"):
        add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")


@pytest.mark.parametrize(
    "html",
    [
        "<h2>[1.0] - 2026-01-01</h2>\n",  # a release's section GitHub shows
        "<h3>Security</h3>\n\n- Pinned a package\n",  # a heading an entry would be shown under
        "<div><h2>[0.9]</h2></div>\n",
        "Notes: <h2>[0.9]</h2>\n",  # inline
        '<p title="<!--"></p><h2>[0.9]</h2><p title="-->"></p>\n',  # no comment: `<!--` in an attribute
        "<!--> <h3>Security</h3> -->\n",  # `<!-->` is a whole comment
        "<!-- <h2>[0.9]</h2> -->\n",  # a comment: which HTML hides what is no guess of forward's
        "<!--\n### Fixed\n- Fixed a crash\n-->\n",  # any HTML block: one left open hides the page's rest on GitHub
        "<div>\nNotes <!--\n</div>\n",  # which both parsers end at the blank line, an HTML parser at the page's end
        "Notes <!-- inline -->\n",  # an inline comment, declaration or processing instruction too
        "Notes: <s>moved\n",  # a formatting tag left open: an HTML parser strikes every later entry
        "- Fixed a <select> box\n",  # a list box holding every later line
        "Notes: <ul>\n",  # every later entry nested a level down
        '### [Notes]: /n "<s>"\n',  # text in a heading or a cell which alone would read as a definition or a fence
        "| ```<s> |\n| - |\n",
        "Notes: [the changes][1.0](<s>)\n\n[1.0]: /compare\n",  # `(<s>)` after a link its definition makes
        "| See <s>notes\n|-|-\n",  # no table (one cell, two in the row below): the text GitHub shows
        "> Note: see <s\n    >\n",  # the `>` a line of the text for GitHub, a quote's marker for markdown-it
        "> - Notes\n>   ```\n>   x\n>   ```\n>   see [t][a\u00a0b<s>]\n\n[a b<s>]: /u\n",  # after code in a tight item
        "[^n]:\n<select>\n",  # a definition for CommonMark, an empty footnote then an HTML block on GitHub
        "See <s>the notes:\n| a | b |\n|-|-|\n",  # text cmark-gfm cuts off a table, at line 0 in its HTML
    ],
)
def test_html_above_the_end_of_unreleased_is_refused_and_nothing_written(tmp_path, html):
    """An HTML parser carries a tag left open onto every line after it (and a heading tag shows a heading forward
    cannot place entries around): forward, which has no HTML parser, refuses HTML above the end of what it reads."""
    path = _changelog(tmp_path, text := f"## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n{html}\n### Fixed\n\n-\n")

    with pytest.raises(
        SeriesError, match=r"^the target's CHANGELOG.md holds HTML at line 7, above the end of what forward reads \(l"
    ):
        add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text() == text


def test_an_entry_that_shows_html_once_added_is_refused_naming_it(tmp_path):
    """The release reads `[the changes][1.0]` as text (no such link there); the target defines `[1.0]`, so `(<s>)` after
    it is HTML there, which would strike every later line."""
    path = _changelog(tmp_path, text := "## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n[1.0]: /compare\n")

    with pytest.raises(
        SeriesError, match=r"^the target's CHANGELOG.md with '- Fixed \[the changes\]\[1.0\]\(<s>\)' added "
    ):
        add_entry(tmp_path, path.name, "### Fixed", "- Fixed [the changes][1.0](<s>)")

    assert path.read_text() == text


def test_a_new_heading_that_shows_html_once_written_is_refused_naming_it(tmp_path):
    """The release shows `### Fixed &lt;select&gt;` as "Fixed <select>", the text forward names the heading by."""
    path = _changelog(tmp_path, text := "## [unreleased]\n\n### Added\n\n- Added a thing\n")

    with pytest.raises(
        SeriesError, match=r"^the target's CHANGELOG.md with '### Fixed <select>\\n\\n- Fixed a crash' added hol"
    ):
        add_entry(tmp_path, path.name, "### Fixed <select>", "- Fixed a crash")

    assert path.read_text() == text


@pytest.mark.parametrize(
    ("see", "foot"),
    [  # each a text link for CommonMark 0.31 and, with the definition GitHub alone reads, text and a raw `<s>` there
        ("[the notes][a b<s>]", "[a\u00a0b<s>]: /u\n"),  # an NBSP label: white space for CommonMark, not for GitHub
        ("[a][d](<s>)", "Note.\n<search>\n[^n]: [d]:\n/u\n"),  # an HTML block for it, a footnote defining `[d]`
        ("[a][d](<s>)", "[^n]: [d]:\n/u\n"),  # a definition of `[^n]` for CommonMark, a footnote defining `[d]`
        ("[a][d](<s>)", "Notes\n<!x\n\n[d]: /u 'a>'\n"),  # an HTML block to its `>` for CommonMark 0.31, not 0.29
    ],
)
def test_text_is_read_for_html_with_the_link_definitions_github_reads(tmp_path, see, foot):
    path = _changelog(
        tmp_path, text := f"See {see}.\n\n## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n## [1.0]\n\n{foot}"
    )

    with pytest.raises(SeriesError, match=r"^the target's CHANGELOG.md holds HTML at line 1, above the end of what"):
        add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text() == text


@pytest.mark.parametrize("top", ['# Changelog <a name="top"></a>\n\n', "", '<a name="top"></a>\n\n'])
def test_html_above_or_in_the_unreleased_heading_is_refused_html_below_its_section_read(tmp_path, top):
    """An HTML parser carries HTML onward, never back: below [unreleased] (upstream's `<class>`) it changes nothing
    forward reads."""
    older = "## [1.0]\n\n### Fixed\n\n- Fixed <class> and <s>struck\n\nSee <hook> below:\n| a | b |\n|-|-|\n\n<!--\n"
    heading = '<a name="unreleased"></a> [unreleased]' if not top else "[unreleased]"
    path = _changelog(tmp_path, text := f"{top}## {heading}\n\n### Fixed\n\n- Fixed a bug\n\n{older}")
    end = text.split("\n").index("## [1.0]") + 1  # the heading that ends [unreleased]

    with pytest.raises(SeriesError, match=rf"holds HTML at line 1, above the end of what forward reads \(line {end}\)"):
        add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    path.write_text(f"## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n{older}")
    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")
    assert path.read_text() == f"## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n- Fixed a crash\n\n{older}"


@pytest.mark.parametrize(
    "markdown",
    [
        "2.6.5 (hotfix)\n<search>\n-----\n",  # GitHub (cmark-gfm) reads <search> inline, so this is an h2 there
        "Notes:\n<source>\n### Security\n",  # and <source> as an HTML block, which ends the paragraph
        "<!x\n## [0.9]\n>\n",  # and `<!` and a small letter as text: no declaration hides the heading there
        "- Fixed a bug\n<source>\nmore notes\n",  # an item GitHub (cmark-gfm) shows one line shorter
        "[1.0]: https://example.com/(x\n",  # a link definition for GitHub, text for CommonMark 0.31 (the lone `(`)
        "[^1]: See the notes\n",  # a footnote definition GitHub hides (nothing refers to it), text for CommonMark
        "- Fixed a bug\n  <source y<>z<!--\n",  # an HTML block for GitHub (`source`), text for CommonMark 0.31
        "| a |\n| - |\n<source y<>z<!--\n",  # the same, a table's row for CommonMark (the table ends apart)
        '[note]: /x "a\n<source y<>z<!--\nb"\n',  # and a definition's title for it, for GitHub text and HTML
        "### ![Security](s.png)\n",  # an image: no text to name the heading by
    ],
)
def test_a_changelog_github_reads_otherwise_than_commonmark_is_refused_and_nothing_written(tmp_path, markdown):
    """forward places entries by CommonMark 0.31's reading; where GitHub's own renderer reads blocks otherwise, neither
    reading of the section can be trusted to be what a maintainer sees, so it refuses instead of guessing."""
    path = _changelog(
        tmp_path, text := f"## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n{markdown}\n### Fixed\n\n-\n"
    )

    with pytest.raises(
        SeriesError, match=r"^the target's CHANGELOG.md shows on GitHub what forward cannot read at line \d+ \(a"
    ):
        add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text() == text


def test_an_entry_goes_under_the_heading_the_release_shows_above_it_not_one_in_code(synthetic, master):
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    commented = changelog.read_text().replace("### Fixed\n\n", "### Fixed\n\n```\n### Added\n```\n\n", 1)
    commit(synthetic.tree, {"src/fakelib/CHANGELOG.md": commented}, "Note\n\nUpstream-Status: Inappropriate [ours]")
    entry = commented.replace("```\n\n", "```\n\n- Fixed a third thing\n\n", 1)

    proc = _forward_after(
        synthetic, master, {"src/fakelib/CHANGELOG.md": entry}, "Fix a third\n\nUpstream-Status: Pending"
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    forwarded = next((synthetic.ws.patches / "master").glob("*-Fix-a-third.patch")).read_text()
    assert "\n - Fixed the version\n \n+- Fixed a third thing\n" in forwarded  # under master's Fixed, not Added


@pytest.mark.parametrize("hide", [("```text\n", "```\n"), ("~~~\n", "~~~\n")])
def test_an_entry_the_release_shows_in_code_is_refused(synthetic, master, hide):
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    hidden = changelog.read_text().replace("### Fixed\n\n", f"### Fixed\n\n{hide[0]}\n{hide[1]}\n", 1)
    commit(synthetic.tree, {"src/fakelib/CHANGELOG.md": hidden}, "Note\n\nUpstream-Status: Inappropriate [ours]")
    entry = hidden.replace(f"{hide[0]}\n", f"{hide[0]}- Fixed a third thing\n", 1)

    proc = _forward_after(
        synthetic, master, {"src/fakelib/CHANGELOG.md": entry}, "Fix a third\n\nUpstream-Status: Pending"
    )

    assert proc.returncode == 2
    assert "adds '- Fixed a third thing' where the release's src/fakelib/CHANGELOG.md shows no item of its own" in (
        proc.stderr
    )


def test_an_entry_is_forwarded_as_its_bytes_whatever_upstreams_attributes_convert(synthetic, master):
    """Where forward runs git, files are the blobs' bytes: no keyword, encoding or filter of upstream's converts."""
    attributes = "src/fakelib/CHANGELOG.md ident working-tree-encoding=ISO-8859-1 filter=none\n"
    commit(master, {".gitattributes": attributes}, "Attributes")
    _pin_master_to_head(synthetic, master)
    changelog = (synthetic.tree / "src/fakelib/CHANGELOG.md").read_text()
    entry = "- Fixed `$Id: v1 $` markers, impörted\n"
    files = {"src/fakelib/CHANGELOG.md": changelog.replace("### Fixed\n\n", f"### Fixed\n\n{entry}\n")}

    proc = _forward_after(synthetic, master, files, "Fix\n\nUpstream-Status: Pending")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"\n+{entry}".encode() in next((synthetic.ws.patches / "master").glob("*-Fix.patch")).read_bytes()


def test_an_entry_the_release_shows_under_no_third_level_heading_goes_under_changed(synthetic, master):
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    notes = f"{changelog.read_text()}\n## Notes for users\n"
    commit(synthetic.tree, {"src/fakelib/CHANGELOG.md": notes}, "Notes\n\nUpstream-Status: Inappropriate [ours]")
    files = {"src/fakelib/CHANGELOG.md": f"{notes}\n- Noted a thing\n"}

    proc = _forward_after(synthetic, master, files, "Note a thing\n\nUpstream-Status: Pending")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    forwarded = next((synthetic.ws.patches / "master").glob("*-Note-a-thing.patch")).read_text()
    assert "+### Changed\n+\n+- Noted a thing\n" in forwarded  # not under the release's last ### Fixed


@pytest.mark.parametrize("bullet", ["-", "*", "+"])
def test_an_empty_item_of_any_bullet_is_the_placeholder_replaced(tmp_path, bullet):
    path = _changelog(tmp_path, f"## [unreleased]\n\n### Fixed\n\n{bullet}\n\n## [1.0]\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text() == "## [unreleased]\n\n### Fixed\n\n- Fixed a crash\n\n## [1.0]\n"


@pytest.mark.parametrize(
    ("entry", "said"),
    [  # GitHub's HTML: a comment to the page's end, every section after it
        ("- Fixed a third thing\n\n  <!--\n", "CHANGELOG.md with 0004-Fix-a-third.patch holds HTML at line 7, above"),
        ("- Fixed a <s>third thing\n", "CHANGELOG.md with 0004-Fix-a-third.patch holds HTML at line 7, above"),
        (  # a label GitHub reads as new, CommonMark 0.31 as upstream's `[pr]` (case folded): its links would change
            "- Fixed a third thing ([#1][pr\u00a0])\n\n  [pr\u00a0]: https://example.com/other\n",
            "shows no item of its own (in code, a comment, with lines it does not add, or with a link definition",
        ),
    ],
)
def test_an_entry_with_html_or_a_link_definition_is_refused(synthetic, master, entry, said):
    changelog = (synthetic.tree / "src/fakelib/CHANGELOG.md").read_text()
    files = {"src/fakelib/CHANGELOG.md": changelog.replace("### Fixed\n\n", f"### Fixed\n\n{entry}\n", 1)}

    proc = _forward_after(synthetic, master, files, "Fix a third\n\nUpstream-Status: Pending")

    assert proc.returncode == 2
    assert said in proc.stderr


def test_an_entry_the_release_reads_with_lines_it_does_not_add_is_refused(synthetic, master):
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    notes = f"{changelog.read_text()}\nSee the migration notes.\n"
    commit(synthetic.tree, {"src/fakelib/CHANGELOG.md": notes}, "Notes\n\nUpstream-Status: Inappropriate [ours]")
    files = {"src/fakelib/CHANGELOG.md": notes.replace("\nSee", "\n- Fixed a third thing\nSee")}  # a lazy line of it

    proc = _forward_after(synthetic, master, files, "Fix a third\n\nUpstream-Status: Pending")

    assert proc.returncode == 2
    assert "adds '- Fixed a third thing' where the release's src/fakelib/CHANGELOG.md shows no item of its own" in (
        proc.stderr
    )


def test_a_release_heading_written_as_a_link_is_the_targets_heading_of_that_text(synthetic, master):
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    linked = changelog.read_text().replace("### Fixed", "### [Fixed](#fixed)")
    commit(synthetic.tree, {"src/fakelib/CHANGELOG.md": linked}, "Link\n\nUpstream-Status: Inappropriate [ours]")
    files = {"src/fakelib/CHANGELOG.md": linked.replace("(#fixed)\n\n", "(#fixed)\n\n- Fixed a third thing\n\n")}

    proc = _forward_after(synthetic, master, files, "Fix a third\n\nUpstream-Status: Pending")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    forwarded = next((synthetic.ws.patches / "master").glob("*-Fix-a-third.patch")).read_text()
    assert "\n - Fixed the version\n \n+- Fixed a third thing\n" in forwarded  # under master's ### Fixed
    assert "+###" not in forwarded


def test_an_entry_with_trailing_white_space_is_added_and_then_there(tmp_path):
    path = _changelog(tmp_path, "## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n- Fixed a race\n  \n  in `save`\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash ")
    assert not add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash ")
    assert not add_entry(tmp_path, path.name, "### Fixed", "- Fixed a race\n\n  in `save`")  # a blank line of spaces


def test_an_entry_in_a_changelog_git_would_call_binary_is_forwarded(synthetic, master):
    """A NUL makes git call the file binary: its diff is still read as text, so no entry goes unseen."""
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    nul = changelog.read_text().replace("# Changelog", "# Changelog\0", 1)
    commit(synthetic.tree, {"src/fakelib/CHANGELOG.md": nul}, "NUL\n\nUpstream-Status: Inappropriate [ours]")
    files = {"src/fakelib/CHANGELOG.md": f"{nul}\n- Fixed a third thing\n", "src/fakelib/third.py": "X = 3\n"}

    proc = _forward_after(synthetic, master, files, "Fix a third\n\nUpstream-Status: Pending")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "+- Fixed a third thing\n" in next((synthetic.ws.patches / "master").glob("*-Fix-a-third.patch")).read_text()


def test_forward_commits_only_the_changelogs_it_writes(synthetic, master):
    """A file upstream committed with CRLF under a `text` attribute is git's to renormalize, not the patch's."""
    commit(master, {"docs/notes.txt": "line one\r\nline two\r\n"}, "Notes")
    commit(master, {".gitattributes": "*.txt text\n"}, "Normalize text files")
    _pin_master_to_head(synthetic, master)

    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0

    assert not [p.name for p in (synthetic.ws.patches / "master").glob("*.patch") if "notes.txt" in p.read_text()]


def test_a_forwarded_patch_whose_entry_upstream_has_already_says_so(synthetic, master):
    changelog = (master / "src/fakelib/CHANGELOG.md").read_text()
    commit(master, {"src/fakelib/CHANGELOG.md": changelog.replace("-\n", "- Fixed the version\n", 1)}, "Note a fix")
    _pin_master_to_head(synthetic, master)

    proc = synthetic.run("forward", "--checkout", str(master))

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"0003-Fix-the-version.patch +forwarded \(1 of its CHANGELOG entries there already\)", proc.stdout)


def test_lines_added_after_an_lf_line_end_in_lf_though_the_first_ends_in_a_lone_cr(tmp_path):
    path = tmp_path / "CHANGELOG.md"
    path.write_bytes(b"## [unreleased]\r\n### Fixed\n\n- Fixed a bug\n\n## [1.0]\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_bytes() == b"## [unreleased]\r\n### Fixed\n\n- Fixed a bug\n\n- Fixed a crash\n\n## [1.0]\n"


def test_a_dashed_line_under_a_table_is_a_rule_not_a_heading_as_github_reads_it(tmp_path):
    table = "| status |\n| - |\n| [unreleased] - YYYY |\n---\n"
    path = _changelog(tmp_path, f"## [2.7.0]\n\n{table}\n### Fixed\n\n- Fixed a bug\n")

    with pytest.raises(SeriesError, match=r"shows 0 second-level headings naming \[unreleased\]"):
        add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")


def test_a_table_right_under_a_paragraph_is_read_alike_and_the_entry_added(tmp_path):
    """cmark-gfm starts such a table on the paragraph's line (its source positions, not what it shows): no refusal."""
    path = _changelog(tmp_path, "## [unreleased]\n\nNotes\n| a |\n| - |\n| 1 |\n\n### Fixed\n\n- Fixed y\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed z")

    assert path.read_text().endswith("### Fixed\n\n- Fixed y\n\n- Fixed z\n")


@pytest.mark.parametrize(
    ("note", "said"),
    [
        ("### ![Security](s.png)\n", "shows on GitHub what forward cannot read at line 3 (a heading with no text"),
        ("See <s>the old notes.\n", "holds HTML at line 3, above the end of what forward reads"),  # all after struck
    ],
)
def test_a_release_changelog_forward_cannot_read_names_the_patch_to_change(synthetic, master, note, said):
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    notes = changelog.read_text().replace("# Changelog\n", f"# Changelog\n\n{note}")  # a release-only patch's
    commit(synthetic.tree, {"src/fakelib/CHANGELOG.md": notes}, "Note\n\nUpstream-Status: Inappropriate [ours]")
    files = {"src/fakelib/CHANGELOG.md": notes.replace("### Fixed\n\n", "### Fixed\n\n- Fixed a third thing\n\n", 1)}

    proc = _forward_after(synthetic, master, files, "Fix a third\n\nUpstream-Status: Pending")

    assert proc.returncode == 2
    assert f"the release's src/fakelib/CHANGELOG.md with 0005-Fix-a-third.patch {said}" in proc.stderr
    assert "write it as Markdown" in proc.stderr
    assert "in 0005-Fix-a-third.patch or before" in proc.stderr


def test_an_entry_under_a_quoted_second_level_heading_is_still_in_the_section(tmp_path):
    path = _changelog(
        tmp_path, text := "## [unreleased]\n\n> ## Note\n> See the guide.\n\n### Fixed\n\n- Fixed a crash\n"
    )

    assert not add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text() == text


def test_an_entry_that_defines_a_link_upstream_uses_is_refused(tmp_path):
    """A link reference definition in an item holds for the whole file: upstream's headings would link elsewhere."""
    path = _changelog(tmp_path, text := "## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n## [1.0]\n\n[1.0]: /v1\n")

    with pytest.raises(SeriesError, match="^forward cannot add '- \\[1.0\\]: /evil' to"):
        add_entry(tmp_path, path.name, "### Fixed", "- [1.0]: /evil")

    assert path.read_text() == text


def test_only_an_empty_item_is_a_placeholder_to_replace(tmp_path):
    path = _changelog(tmp_path, "## [unreleased]\n\n### Fixed\n\n    -\n\n## [1.0]\n")  # a code block, not an item

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text() == "## [unreleased]\n\n### Fixed\n\n    -\n\n- Fixed a crash\n\n## [1.0]\n"


@pytest.mark.parametrize("above", ["```md\n{}```\n", "~~~\n{}~~~\n"])
def test_an_unreleased_section_in_a_code_block_above_is_not_the_section(tmp_path, above):
    example = above.format("## [unreleased]\n\n### Fixed\n\n- Fixed a crash\n")
    path = _changelog(tmp_path, f"# Changelog\n\n{example}\n## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text().endswith(f"{example}\n## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n- Fixed a crash\n")


def test_a_first_level_heading_ends_the_unreleased_section(tmp_path):
    path = _changelog(
        tmp_path, "## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n# Archive\n\n### Fixed\n\n- Fixed a crash\n"
    )

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text().startswith("## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n- Fixed a crash\n\n# Archive")


@pytest.mark.parametrize("rule", ["---", "- - -", "* * *", "___"])
def test_an_entry_goes_above_the_rule_that_ends_the_unreleased_section(tmp_path, rule):
    path = _changelog(tmp_path, f"## [unreleased]\n\n### Fixed\n\n- Fixed a bug\n\n{rule}\n\n## [1.0]\n")

    assert add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash")

    assert path.read_text().endswith(f"- Fixed a bug\n\n- Fixed a crash\n\n{rule}\n\n## [1.0]\n")


def test_an_entry_upstream_has_with_another_bullet_is_there_already(tmp_path):
    path = _changelog(tmp_path, "## [unreleased]\n\n### Fixed\n\n* Fixed a crash\n  in `answer()`\n\n---\n")

    assert not add_entry(tmp_path, path.name, "### Fixed", "- Fixed a crash\n  in `answer()`")


def test_an_entry_on_a_line_with_a_cr_is_there_already(tmp_path):
    path = tmp_path / "CHANGELOG.md"
    path.write_bytes(b"## [unreleased]\r\n\n### Fixed\n\n- Fixed z\n\n## [1.0]\n")

    assert not add_entry(tmp_path, path.name, "### Fixed", "- Fixed z")


def test_a_crlf_changelog_keeps_its_line_endings(tmp_path):
    path = tmp_path / "CHANGELOG.md"
    path.write_bytes(b"## [unreleased]\r\n\r\n### Fixed\r\n\r\n-\r\n\r\n## [1.0]\r\n")

    add_entry(tmp_path, path.name, "### Fixed", "- Fixed z")

    assert path.read_bytes() == b"## [unreleased]\r\n\r\n### Fixed\r\n\r\n- Fixed z\r\n\r\n## [1.0]\r\n"


@pytest.mark.parametrize(
    "status",  # the second as git cherry-pick -x and DEP-3's folded fields leave it: a trailer for git, as for DEP-3
    ["Upstream-Status: Inappropriate", "Description: a workaround,\n until torch 9\nupstream-status:  Inappropriate"],
)
def test_a_release_only_workaround_is_reported_and_not_carried(synthetic, master, status):
    """A patch marked `Upstream-Status: Inappropriate [why]` (DEP-3) stays in the release series only."""
    picked = f"(cherry picked from commit {'a' * 40})"
    message = f"Work around a torch bug\n\n{status} [torch's bug, fixed in torch 9]\nBug: none\n{picked}"
    proc = _forward_after(synthetic, master, {"src/fakelib/workaround.py": "WORKAROUND = True\n"}, message)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"0004-Work-around-a-torch-bug.patch +release only \(torch's bug, fixed in torch 9\)", proc.stdout)
    names = [p.name for p in read_series(synthetic.ws.patches / "master/series")]
    assert names == ["0001-Add-a-CHANGELOG-entry.patch", "0002-Fix-the-version.patch"]


@pytest.mark.parametrize(  # a typo, a look-alike hyphen, a value of no known form
    "status", ["Upstream Status: Inappropriate", "Upstream\u2011Status: Inappropriate", "Upstream-Status: [Inappr.]"]
)
def test_forward_refuses_a_patch_whose_status_git_does_not_read(synthetic, master, status):
    """Without a status forward cannot tell a release-only patch: it would carry it to upstream."""
    message = f"Work around a torch bug\n\n{status} [torch's bug]\nBug: none"
    proc = _forward_after(synthetic, master, {"src/fakelib/workaround.py": "WORKAROUND = True\n"}, message)

    assert one_error(proc) == (
        "error: 0004-Work-around-a-torch-bug.patch has no Upstream-Status trailer git reads with a value forward "
        "knows: write one (pending, submitted, accepted, backport, denied, inactive-upstream, inappropriate) in its "
        "last paragraph, of trailers"
    )
    assert sorted(p.name for p in (synthetic.ws.patches / "master").iterdir()) == ["base.toml"]


def test_a_patch_upstream_merged_and_reverted_is_forwarded_with_a_changelog_file_it_adds(synthetic, master):
    """Upstream's tree decides, not its history: a commit with the patch's id may have been reverted since."""
    git(master, "revert", "--no-edit", "HEAD~1")  # upstream's "Fix the answer", the series' first patch
    _pin_master_to_head(synthetic, master)
    new_changelog = {"src/fakelib/plugins/CHANGELOG.md": "# Changelog\n\nThe plugins' changes.\n\n## [unreleased]\n"}
    proc = _forward_after(synthetic, master, new_changelog, "Add the plugins' CHANGELOG\n\nUpstream-Status: Pending")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"0001-Fix-the-answer.patch +forwarded", proc.stdout)
    forwarded = read_series(synthetic.ws.patches / "master" / "series")
    assert "src/fakelib/plugins/CHANGELOG.md" in forwarded[-1].new_files


def test_a_patch_mailed_as_quoted_printable_is_refused_before_anything_is_written(synthetic, master):
    """git am decodes `=3D`, the file's text shows it: one reading of a patch, so it is refused, naming the patch."""
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    added = changelog.read_text().replace("- Fixed the version\n", "- Fixed the version\n\n- Fixed `a == b`\n")
    files = {"src/fakelib/CHANGELOG.md": added, CORE: "def answer():\n    return 43\n"}
    commit(synthetic.tree, files, "Fix a\n\nUpstream-Status: Pending")
    export_series(synthetic.tree, synthetic.ws.patches, branch="series")
    mailed = synthetic.ws.patches / "0004-Fix-a.patch"
    headers, body = mailed.read_text().split("\n\n", 1)
    mime = "MIME-Version: 1.0\nContent-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: quoted-printable"
    mailed.write_text(f"{headers}\n{mime}\n\n{body.replace('a == b', 'a =3D=3D b')}")
    before = files_of(synthetic.ws.patches)

    error = one_error(synthetic.run("forward", "--checkout", str(master)))

    assert f"{mailed.name}: git am reads other changes than its text shows" in error
    assert files_of(synthetic.ws.patches) == before


def test_entries_of_a_changelog_the_tree_marks_binary_are_carried(synthetic, master):
    """A tree's `-diff` makes export write the CHANGELOG as a binary patch: forward reads git's text diff of it."""
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    added = changelog.read_text().replace("- Fixed the version\n", "- Fixed the version\n\n- Fixed b\n")
    files = {".gitattributes": "*.md -diff\n", "src/fakelib/CHANGELOG.md": added, CORE: "def answer():\n    return 4\n"}
    proc = _forward_after(synthetic, master, files, "Fix b\n\nUpstream-Status: Pending")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "+- Fixed b\n" in (synthetic.ws.patches / "master" / "0003-Fix-b.patch").read_text()


def test_forward_refuses_a_changelog_line_it_cannot_carry(synthetic, master):
    """Forward re-places the entries a patch adds; an entry it rewords or removes would be lost on the way."""
    changelog = synthetic.tree / "src/fakelib/CHANGELOG.md"
    reworded = changelog.read_text().replace("- Fixed the version\n", "- Fixed the version, in wheels too\n")
    message = "Reword an entry\n\nUpstream-Status: Pending"
    proc = _forward_after(synthetic, master, {"src/fakelib/CHANGELOG.md": reworded}, message)

    assert one_error(proc) == (
        "error: 0004-Reword-an-entry.patch removes '- Fixed the version' in src/fakelib/CHANGELOG.md: forward carries "
        "`- ` entries with indented lines only; write it so, or move it to a patch marked `Upstream-Status: "
        "Inappropriate [why]`"
    )
    assert sorted(p.name for p in (synthetic.ws.patches / "master").iterdir()) == ["base.toml"]


def test_forward_refuses_a_merge_in_progress_in_the_checkout(synthetic, master):
    """Forward reads the checkout's refs, which a merge or rebase in progress has not settled."""
    git(master, "checkout", "-q", "-b", "other", "1.0")
    commit(master, {"src/fakelib/core.py": "def answer():\n    return 0\n"}, "Other answer")
    subprocess.run(["git", "merge", "-q", "master"], cwd=master, capture_output=True, check=False)  # conflicts
    assert (master / ".git" / "MERGE_HEAD").exists()

    proc = synthetic.run("forward", "--checkout", str(master))

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: a git merge is in progress in {master}; finish it (git commit) or abort it (git merge --abort), "
        "then re-run"
    ]
    assert not (synthetic.ws.patches / "master" / "series").exists()


@pytest.mark.parametrize(
    ("command", "killed_at"),
    [
        (("check",), "export-staged"),
        (("check", "--checkout", "{master}"), "export-staged"),
        (("check", "--onto", "master", "--checkout", "{master}"), None),
        (("forward", "--checkout", "{master}"), "forward-scratch"),
    ],
)
def test_a_killed_or_finished_run_makes_its_clones_in_the_work_directory_only(synthetic, master, command, killed_at):
    """Nothing in the system's temporary folder; a killed run's clone stays in the scratch folder for the next run."""
    system_tmp, scratch = synthetic.ws.workdir.parent / "system-tmp", synthetic.ws.scratch
    system_tmp.mkdir()
    args = [*(arg.format(master=master) for arg in command), "--patches", str(synthetic.ws.patches)]
    env = {**os.environ, "TMPDIR": str(system_tmp)}
    if killed_at:
        killed = cli(*args, "--workdir", str(synthetic.ws.workdir), env={**env, SIGNAL_AT_ENV: f"{killed_at}:SIGKILL"})
        assert killed.returncode == -9, killed.stderr
        assert list(system_tmp.iterdir()) == []
        assert list(scratch.iterdir()) != []
        assert sorted(p.name for p in (synthetic.ws.patches / "master").iterdir()) == ["base.toml"]

    finished = cli(*args, "--workdir", str(synthetic.ws.workdir), env=env)

    assert "error:" not in finished.stderr, finished.stderr
    assert list(system_tmp.iterdir()) == []
    assert not scratch.exists() or list(scratch.iterdir()) == []


def test_check_says_when_the_forward_series_is_not_what_forward_writes_from_the_release_series(synthetic, master):
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    assert synthetic.run("check", "--checkout", str(master)).returncode == 0
    (synthetic.tree / "src/fakelib/__init__.py").write_text("VERSION = '1.0.2'\n")  # a release patch changed
    git(synthetic.tree, "commit", "-q", "-a", "--amend", "--no-edit")
    from patchseries.export import export_series

    export_series(synthetic.tree, synthetic.ws.patches, branch="series")

    check = synthetic.run("check", "--checkout", str(master))

    assert check.returncode == 1, check.stdout + check.stderr
    drift = [line for line in check.stdout.splitlines() if line.startswith("drift:")]
    assert drift == [
        f"drift: master/ is not what forward writes from the release series (0002-Fix-the-version.patch); "
        f"`{TOOL} forward --checkout {master} --patches {synthetic.ws.patches} --workdir {synthetic.ws.workdir}`"
    ]
    remedy = subprocess.run(drift[0].split("`")[1], shell=True, capture_output=True, text=True, check=False)
    assert remedy.returncode == 0, remedy.stdout + remedy.stderr
    assert synthetic.run("check", "--checkout", str(master)).returncode == 0


def test_checks_forward_remedy_runs_as_printed_and_keeps_a_hand_edit_forward_replaces(synthetic, master):
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    (patch,) = (synthetic.ws.patches / "master").glob("0001-*.patch")
    patch.write_text(patch.read_text().replace("\n\n---\n", "\n\nA word of mine.\n---\n", 1))  # a fresh export keeps
    edited = patch.read_bytes()

    check = synthetic.run("check", "--checkout", str(master))
    fix = [line for line in check.stdout.splitlines() if line.startswith("drift:")][-1]
    remedy = shell(fix.split("`")[1])

    assert remedy.returncode == 0, f"{fix}\n{remedy.stderr}"
    assert patch.with_name(f"{patch.name}.mine").read_bytes() == edited
    assert synthetic.run("check", "--checkout", str(master)).returncode == 0


def test_checks_drift_remedy_for_master_keeps_the_hand_edits_forward_replaces(synthetic, master):
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    first, second = sorted((synthetic.ws.patches / "master").glob("*.patch"))
    first.write_text(first.read_text().replace("\nSubject:", "\nX-Note: mine\nSubject:", 1))  # drift
    second.write_text(second.read_text().replace("\n\n---\n", "\n\nA word of mine.\n---\n", 1))  # a fresh export keeps
    edits = {path: path.read_bytes() for path in (first, second)}

    check = synthetic.run("check", "--checkout", str(master))
    fix = next(line for line in check.stdout.splitlines() if line.startswith("drift: to write the series again"))
    remedy = shell(fix.split("`")[1])

    assert remedy.returncode == 0, f"{fix}\n{remedy.stderr}"
    assert {path: path.with_name(f"{path.name}.mine").read_bytes() for path in edits} == edits


def test_check_says_when_the_forward_folder_has_no_series(synthetic, master):
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    (synthetic.ws.patches / "master" / "series").unlink()  # git rm patches/master/series: master/ must not pass unread

    check = synthetic.run("check", "--checkout", str(master))

    assert check.returncode == 1, check.stdout + check.stderr
    remedy = check.stdout.split("drift: master/ is not what forward writes from the release series (series); `")[1]
    assert subprocess.run(remedy.split("`")[0], shell=True, capture_output=True, check=False).returncode == 0
    assert synthetic.run("check", "--checkout", str(master)).returncode == 0


@pytest.mark.parametrize("kind", ["dangling link", "file"])
def test_check_refuses_a_forward_folder_that_is_not_a_folder(synthetic, master, tmp_path, kind):
    forward_dir = synthetic.ws.patches / "master"
    shutil.rmtree(forward_dir)
    if kind == "file":
        forward_dir.write_text("mine\n")
    else:
        forward_dir.symlink_to(tmp_path / "nowhere")

    error = one_error(synthetic.run("check", "--checkout", str(master)))

    assert str(forward_dir / "base.toml") in error


CORE = "src/fakelib/core.py"


def test_each_patch_is_placed_against_an_upstream_ref(synthetic):
    tree = synthetic.tree
    git(tree, "checkout", "-q", "-b", "master", "base")
    # upstream merged the fix under another message, and rewrote the CHANGELOG line the second patch edits: CHANGELOG
    # entries aside, as forward re-places them, the second patch applies
    commit(tree, {"src/fakelib/core.py": "def answer():\n    return 42\n",
                  "tests/tests_pytorch/core/test_answer.py": "from fakelib.core import answer\n\n\n"
                  "def test_answer():\n    assert answer() == 42\n"}, "Merged upstream as #1")  # fmt: skip
    commit(tree, {"src/fakelib/CHANGELOG.md": "# Changelog\n\n## [unreleased]\n\n### Fixed\n\n- Something else\n"}, "x")

    standings = check_onto(tree, "master", read_series(synthetic.ws.series_file), synthetic.ws.scratch)

    assert [(s.status, s.detail) for s in standings] == [
        ("already upstream", "changes present, CHANGELOG entries aside"),
        ("applies cleanly", ""),
    ]
    assert git(tree, "status", "--porcelain") == ""  # the upstream repository is only read


def test_patch_that_applies_is_reported_clean(synthetic):
    git(synthetic.tree, "branch", "master", "base")

    standings = check_onto(synthetic.tree, "master", read_series(synthetic.ws.series_file), synthetic.ws.scratch)

    assert [s.status for s in standings] == ["applies cleanly", "applies cleanly"]


def test_a_submodule_bump_a_rename_and_an_empty_new_file_are_judged_as_git_would(synthetic):
    """Upstream lacks each: the submodule's commit, the rename (upstream renamed the file otherwise), the empty file
    (upstream's has lines); git's own `git am --3way` stops on the rename, and no check may call them upstream."""
    tree = synthetic.tree
    legacy = {"src/fakelib/legacy.py": "".join(f"LINE_{n} = {n}\n" for n in range(30))}
    commit(tree, legacy, "Legacy\n\nUpstream-Status: Pending")
    (tree / "_notebooks").mkdir()  # a submodule not checked out, as in a clone of Lightning
    git(tree, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},_notebooks")
    git(tree, "commit", "-q", "-m", "Add the notebooks\n\nUpstream-Status: Pending")
    git(tree, "branch", "master")  # upstream: the series so far
    git(tree, "update-index", "--cacheinfo", f"160000,{'2' * 40},_notebooks")
    git(tree, "commit", "-q", "-m", "Bump the notebooks\n\nUpstream-Status: Pending")
    git(tree, "mv", "src/fakelib/legacy.py", "src/fakelib/compat.py")
    git(tree, "commit", "-q", "-m", "Rename legacy to compat\n\nUpstream-Status: Pending")
    commit(tree, {"src/fakelib/py.typed": ""}, "Mark it typed\n\nUpstream-Status: Pending")
    export_series(tree, synthetic.ws.patches, branch="series")
    git(tree, "checkout", "-q", "master")
    git(tree, "mv", "src/fakelib/legacy.py", "src/fakelib/old.py")
    commit(tree, {"src/fakelib/py.typed": "partial\n"}, "Rename legacy to old; typed in part")

    standings = check_onto(tree, "master", read_series(synthetic.ws.series_file)[4:], synthetic.ws.scratch)

    assert [(s.status, s.detail) for s in standings] == [
        ("applies cleanly", ""),
        ("conflicts", "src/fakelib/compat.py, src/fakelib/legacy.py, src/fakelib/old.py"),
        ("conflicts", "src/fakelib/py.typed: upstream has its own"),
    ]


@pytest.mark.parametrize("index", ["as exported", "removed", "swapped", "unknown blobs"])
def test_a_three_way_merge_that_writes_other_lines_or_places_than_the_patch_is_a_conflict(synthetic, index):
    """Upstream's union merge attribute (git's text merge is used: a conflict), upstream's content for a new empty
    file beside another, a new file whose name is a glob, a hunk whose context upstream changed and which git am
    applies to an identical block elsewhere (a 3-way merge places it by the file's history), whatever blobs its
    index line names (git apply --3way would fall back to applying it by its context)."""
    tree, body = synthetic.tree, "    w = 0\n    x = 0\n    a = 1\n    b = 2\n    c = 3\n    y = 4\n    z = 5\n"
    hooks = f"def on_validation(batch):\n{body}\n\ndef on_test(batch):\n{body}"
    commit(tree, {"src/fakelib/hooks.py": hooks}, "Add hooks\n\nUpstream-Status: Pending")
    plugins = {"src/fakelib/plugins/__init__.py": "", "src/fakelib/plugins/base.py": "class Plugin:\n    pass\n"}
    commit(tree, plugins, "Make plugins a package\n\nUpstream-Status: Pending")
    commit(tree, {"src/fakelib/routes/[id].py": ""}, "Add a route\n\nUpstream-Status: Pending")
    commit(tree, {"src/fakelib/hooks.py": hooks.replace("b = 2", "b = 3", 1)}, "Fix\n\nUpstream-Status: Pending")
    export_series(tree, synthetic.ws.patches, branch="series")
    fix = synthetic.ws.patches / "0006-Fix.patch"
    ids = re.search(r"\nindex (\w+)\.\.(\w+) 100644\n", text := fix.read_text())
    lines = {
        "removed": "\n",
        "swapped": f"\nindex {ids[2]}..{ids[1]} 100644\n",
        "unknown blobs": "\nindex 1111111..2222222 100644\n",
    }
    fix.write_text(text.replace(ids[0], lines.get(index, ids[0])))
    git(tree, "checkout", "-q", "-b", "master", "base")
    stubs = {"src/fakelib/plugins/__init__.py": "raise ImportError\n", "src/fakelib/routes/[id].py": "raise KeyError\n"}
    stubs["src/fakelib/hooks.py"] = hooks.replace("x = 0", "x = 1", 1)  # upstream's change in on_validation
    commit(tree, {".gitattributes": "*.py merge=union\n", CORE: "def answer():\n    return 43\n", **stubs}, "Up")

    standings = check_onto(tree, "master", read_series(synthetic.ws.series_file), synthetic.ws.scratch)

    assert [(s.status, s.detail) for s in standings] == [
        ("conflicts", "src/fakelib/core.py"),
        ("applies cleanly", ""),
        ("conflicts", "src/fakelib/hooks.py"),
        ("conflicts", "git am --3way wrote other lines, or at other places"),
        ("conflicts", "src/fakelib/routes/[id].py: upstream has its own"),
        ("conflicts", "git am --3way wrote other lines, or at other places"),
    ]


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


@pytest.mark.parametrize(
    ("command", "lacking"),
    [
        (("check", "--onto", "nope"), "the ref 'nope'"),
        (("forward",), "the release's tag 'refs/tags/1.0'"),
        (("forward",), f"the pinned commit '{'0' * 40}'"),
    ],
)
def test_a_checkout_without_the_ref_a_command_needs_is_one_refusal(synthetic, master, command, lacking):
    if "tag" in lacking:
        git(master, "tag", "-d", "1.0")
    toml = synthetic.ws.patches / "master" / "base.toml"
    toml.write_text(toml.read_text().split("commit = ")[0] + f'commit = "{"0" * 40}"\n')

    proc = synthetic.run(*command, "--checkout", str(master))

    advice = f"fetch it into {master} from the remote that has it"
    assert one_error(proc) == f"error: {master} lacks {lacking}; {advice} and re-run"
    assert sorted(p.name for p in toml.parent.iterdir()) == ["base.toml"]


def test_export_into_the_forward_series_without_a_tree_names_an_edit_that_makes_one(synthetic, master):
    forward_dir = synthetic.ws.patches / "master"
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    toml = forward_dir / "base.toml"
    toml.write_text(toml.read_text().replace("https://git.invalid/fakelib.git", str(master)))  # no network here
    options = ("--patches", str(forward_dir), "--workdir", str(synthetic.ws.workdir))

    error = one_error(cli("export", *options))

    made = shell(between(error, f"{TOOL} edit", "`"))  # the edit it names, as printed: no sdist has master's base
    assert made.returncode == 0, made.stderr
    assert cli("export", *options).returncode == 0  # the tree it made is export's default


@pytest.mark.parametrize("command", ["forward", "check", "apply", "edit"])
def test_a_command_reads_the_series_under_its_lock_from_another_work_directory(synthetic, master, tmp_path, command):
    options = ("--patches", str(synthetic.ws.patches), "--workdir", str(tmp_path / "other"))
    with series_lock(synthetic.ws.patches):  # an export switching the series' files
        proc = cli(command, *(["--checkout", str(master)] if command == "forward" else []), *options)

    assert "another patchseries export or forward is writing" in one_error(proc)


def test_the_fetch_advice_names_no_command_and_says_when_the_clone_is_shallow(upstream_clone, tmp_path):
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{upstream_clone}", str(clone))

    assert fetch_advice(upstream_clone) == f"fetch it into {upstream_clone} from the remote that has it"
    assert fetch_advice(clone) == f"fetch it into {clone} from the remote that has it (--unshallow: it is shallow)"


def test_forward_says_what_it_removed_that_git_holds(synthetic, master):
    forward_dir = synthetic.ws.patches / "master"
    assert synthetic.run("forward", "--checkout", str(master)).returncode == 0
    commit(master, {"src/fakelib/mine.py": "X = 2\n"}, "Mine")  # a patch of the person's, only in master/
    mine = Path(git(master, "format-patch", "-1", "--start-number", "9", "-o", str(forward_dir)))
    git(master, "reset", "-q", "--hard", "HEAD~1")
    (forward_dir / "series").write_text((forward_dir / "series").read_text() + f"{mine.name}\n")
    git(forward_dir, "init", "-q")
    git(forward_dir, "add", "-A")
    git(forward_dir, "commit", "-q", "-m", "mine")

    proc = synthetic.run("forward", "--checkout", str(master))

    assert proc.returncode == 0, proc.stderr
    assert f"note: replaced or removed {mine.name}" in proc.stdout


def test_forward_into_the_folder_it_reads_does_not_wait_for_its_own_lock(synthetic, master):
    proc = synthetic.run("forward", "--checkout", str(master), "--to", str(synthetic.ws.patches))

    assert "another patchseries export or forward is writing" not in proc.stderr


def test_a_changelog_a_patch_creates_and_changes_again_is_never_left_out(synthetic, master):
    """A second hunk for the new file (added by hand; git am applies both): forward may not drop the file (it took the
    second hunk's path for an existing CHANGELOG's and excluded both); git's 3-way cannot place it: a conflict."""
    notes = "# Changelog\n\n## [unreleased]\n\n### Added\n\n- First entry\n"
    files = {"src/fakelib/plugins/CHANGELOG.md": notes, "src/fakelib/plugins/__init__.py": "X = 1\n"}
    commit(synthetic.tree, files, "Add plugins\n\nUpstream-Status: Pending")
    export_series(synthetic.tree, synthetic.ws.patches, branch="series")
    patch, path = synthetic.ws.patches / "0004-Add-plugins.patch", "src/fakelib/plugins/CHANGELOG.md"
    more = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -5,3 +5,4 @@\n ### Added\n \n - First entry\n"
    patch.write_text(
        patch.read_text().replace(
            "diff --git a/src/fakelib/plugins/__init__", f"{more}+- Second\ndiff --git a/src/fakelib/plugins/__init__"
        )
    )
    before = files_of(synthetic.ws.patches)

    proc = synthetic.run("forward", "--checkout", str(master))

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"0004-Add-plugins.patch +conflicts", proc.stdout), proc.stdout
    assert files_of(synthetic.ws.patches) == before
