"""Reading the series file and parsing patches: bad input is refused with one clear line."""

from __future__ import annotations

import base64

import pytest

from conftest import commit, git, one_error
from patchseries.errors import SeriesError
from patchseries.series import diff_paths, file_sections, fingerprint, hunks, parse_patch, read_series, section_path


def test_reads_series_in_order_with_changes_and_trailers(synthetic):
    patches = read_series(synthetic.ws.series_file)

    assert [p.subject for p in patches] == ["Fix the answer", "Add a CHANGELOG entry"]
    assert patches[0].new_files == ["tests/tests_pytorch/core/test_answer.py"]
    assert patches[0].touched_existing == ["src/fakelib/core.py"]
    assert ("Bug", "https://example.invalid/1") in patches[0].trailers


def test_a_byte_order_mark_before_the_first_name_is_not_part_of_it(synthetic):
    """A BOM some editors write is no part of the first name (no error naming an invisible character)."""
    series = synthetic.ws.series_file
    series.write_bytes(b"\xef\xbb\xbf" + series.read_bytes())

    assert [p.subject for p in read_series(series)] == ["Fix the answer", "Add a CHANGELOG entry"]


def test_series_naming_a_missing_file_is_refused(synthetic):
    with synthetic.ws.series_file.open("a") as handle:
        handle.write("0009-missing.patch\n")

    with pytest.raises(SeriesError, match=r"series names 0009-missing.patch, but .* does not exist"):
        read_series(synthetic.ws.series_file)


def test_missing_series_file_is_refused(tmp_path):
    with pytest.raises(SeriesError, match="series file .* does not exist"):
        read_series(tmp_path / "series")


def test_file_that_is_not_a_patch_is_refused(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    first.write_text("this is not a patch\n")

    with pytest.raises(SeriesError, match="is not a git format-patch file"):
        read_series(synthetic.ws.series_file)


def test_patch_with_a_corrupt_hunk_is_refused(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    first.write_text(first.read_text().replace("@@ -1,2 +1,2 @@", "@@ -1,2 +1,9 @@"))

    with pytest.raises(SeriesError, match="is malformed"):
        read_series(synthetic.ws.series_file)


def test_fingerprint_changes_with_content(synthetic):
    before = fingerprint(read_series(synthetic.ws.series_file))
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    first.write_text(first.read_text().replace("Fix the answer", "Fix the answer properly"))

    assert fingerprint(read_series(synthetic.ws.series_file)) != before


def test_patch_listed_twice_is_refused(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    with synthetic.ws.series_file.open("a") as handle:
        handle.write(f"{first.name}\n")

    with pytest.raises(SeriesError, match=rf"lists {first.name} twice \(lines 2 and 4\); list each once"):
        read_series(synthetic.ws.series_file)


def test_a_comment_with_a_unicode_line_separator_is_one_line_as_sed_counts_them(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    listed = synthetic.ws.series_file.read_text()
    synthetic.ws.series_file.write_text(f"# see\u2028the thread\n{listed}{first.name}\n")

    with pytest.raises(SeriesError, match=rf"lists {first.name} twice \(lines 3 and 5\); list each once"):
        read_series(synthetic.ws.series_file)


@pytest.mark.parametrize("spelling", ["./{name}", "{name}/", "../patches/{name}", ".//{name}", "sub/../{name}"])
@pytest.mark.parametrize("command", ["apply", "status", "check"])
def test_patch_listed_twice_in_another_spelling_is_refused(synthetic, spelling, command):
    """``./0001-x.patch`` beside ``0001-x.patch`` is the same patch listed twice."""
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    (synthetic.ws.patches / "sub").mkdir()
    other = spelling.format(name=first.name)
    with synthetic.ws.series_file.open("a") as handle:
        handle.write(f"{other}\n")

    proc = synthetic.run(command)

    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if not line.startswith("[patchseries")] == [
        f"error: {synthetic.ws.series_file} lists {other} twice (lines 2 and 4); list each once"
    ]
    assert proc.stdout == ""


def test_patch_outside_the_series_directory_is_refused(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    outside = synthetic.ws.patches.parent / "x.patch"
    outside.write_bytes(first.read_bytes())
    synthetic.ws.series_file.write_text("../x.patch\n")

    with pytest.raises(SeriesError, match=r"line 1 names \.\./x\.patch, outside .*; list patch files of that folder"):
        read_series(synthetic.ws.series_file)


def test_empty_series_is_refused_before_any_work(synthetic, tmp_path):
    synthetic.ws.series_file.write_text("# nothing yet\n")
    series_before = git(synthetic.tree, "rev-parse", "series")

    proc = synthetic.run("apply")

    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith(f"error: {synthetic.ws.series_file} lists no patches")
    assert "stage 2/5" not in proc.stderr
    assert git(synthetic.tree, "rev-parse", "series") == series_before


@pytest.mark.parametrize(
    ("line", "paths"),
    [
        ("diff --git a/src/pkg/mod.py b/src/pkg/mod.py", ("src/pkg/mod.py", "src/pkg/mod.py")),
        ("diff --git a/docs/my page.rst b/docs/my page.rst", ("docs/my page.rst", "docs/my page.rst")),
        ("diff --git a/a b b/a b", ("a b", "a b")),
        ('diff --git "a/caf\\303\\251 \\"x\\".py" "b/caf\\303\\251 \\"x\\".py"', ('café "x".py', 'café "x".py')),
        ("diff --git a/old.py b/new.py", ("old.py", "new.py")),
        ("diff --git a/x y b/z w", None),
        ("not a diff header", None),
    ],
)
def test_diff_header_paths_with_spaces_and_quoting(line, paths):
    assert diff_paths(line) == paths


def test_patch_of_files_with_spaces_and_non_ascii_names(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    git(tree, "init", "-q")
    commit(tree, {"src/my module.py": "x = 1\n", "docs/café.rst": "Title\n"}, "base")
    commit(tree, {"src/my module.py": "x = 2\n", "docs/café.rst": "Title\n=====\n", "tests/test a.py": "\n"}, "change")
    git(tree, "format-patch", "-q", "-1", "-o", str(tmp_path / "out"))

    patch = parse_patch(next((tmp_path / "out").glob("*.patch")))

    assert patch.touched_existing == ["docs/café.rst", "src/my module.py"]
    assert patch.new_files == ["tests/test a.py"]


def test_file_sections_split_a_patch_at_each_diff_header_only():
    patch = (
        "Subject: [PATCH] x\n\nA message line that mentions diff --git a/x b/x mid-line.\n---\n a | 1 +\n"
        "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n"
        "diff --git a/b c b/b c\n--- a/b c\n+++ b/b c\n@@ -1 +1 @@\n-x\n+diff --git a/z b/z\n"
    )

    sections = file_sections(patch)

    assert [section_path(section) for section in sections] == ["a", "b c"]
    assert sections[1].endswith("+diff --git a/z b/z\n")


def test_hunks_are_as_long_as_their_headers_say():
    """A removed line ``- `` reads as ``-- `` (format-patch's signature), an added ``++ x`` as ``+++ x``: only the
    header's line counts tell them apart from what follows the hunk."""
    section = (
        "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -3,2 +3,3 @@ def f():\n a = 1\n-- \n+++ x\n+b\n"
        "\\ No newline at end of file\n@@ -9 +10,0 @@\n-gone\n-- \n2.43.0\n"
    )
    assert hunks(section) == [
        [(" ", 3, "a = 1"), ("-", 4, "- "), ("+", 4, "++ x"), ("+", 5, "b")],
        [("-", 10, "gone")],
    ]


def test_a_series_line_spelled_with_dot_slash_is_the_patch_it_names(synthetic):
    series = synthetic.ws.patches / "series"
    names = [line for line in series.read_text().splitlines() if line.endswith(".patch")]
    series.write_text("".join(f"./{name}\n" for name in names))
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "The series")):  # held by git: export may
        git(synthetic.ws.patches, *args)  # replace it
    git(synthetic.tree, "commit", "-q", "--amend", "-m", "Add a CHANGELOG entry\n\nUpstream-Status: Accepted")

    proc = synthetic.run("export")

    assert proc.returncode == 0, proc.stderr
    assert [line for line in series.read_text().splitlines() if line.endswith(".patch")] == names
    assert synthetic.run("apply").returncode == 0


def test_a_control_character_in_a_series_line_is_one_error_line(synthetic):
    series = synthetic.ws.patches / "series"
    series.write_bytes(series.read_bytes() + b"0003\x00x.patch\n")

    for command in ("status", "check", "apply"):
        assert "is not a file name: '0003\\x00x.patch'" in one_error(synthetic.run(command))


def test_a_series_line_naming_a_folder_says_it_is_not_a_file(synthetic):
    (synthetic.ws.patches / "sub").mkdir()
    series = synthetic.ws.patches / "series"
    series.write_text(series.read_text() + "sub\n")

    assert f"{synthetic.ws.patches / 'sub'} is not a file" in one_error(synthetic.run("status"))


@pytest.mark.parametrize(
    "start", ["", "From mboxrd@z Thu Jan  1 00:00:00 1970", f"From {'0' * 64} Mon Sep 17 00:00:00 2001"]
)
def test_a_patch_file_holding_two_patches_is_refused(synthetic, start):
    """Wherever git am starts another mail: format-patch's first line, an mbox archive's, a SHA-256 repository's."""
    first, second = sorted(synthetic.ws.patches.glob("*.patch"))
    rest = second.read_text() if not start else f"{start}\n{second.read_text().partition(chr(10))[2]}"
    first.write_text(first.read_text() + rest)
    (synthetic.ws.patches / "series").write_text(f"{first.name}\n")

    for command in ("status", "apply"):
        assert f"{first.name} holds 2 patches" in one_error(synthetic.run(command))


def test_a_patch_whose_mail_git_am_reads_otherwise_than_its_text_is_refused(synthetic):
    """A change in a base64 attachment: git am applies it, a reader of the file's text does not see it."""
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    head, _, body = first.read_text().partition("\n\n")
    message, _, diff = body.partition("\n---\n")
    shown, _, attached = diff.partition("diff --git a/tests/")
    head += '\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="XX"'
    text = f"--XX\nContent-Type: text/plain; charset=UTF-8\n\n{message}\n---\n{shown}"
    attachment = base64.encodebytes(f"diff --git a/tests/{attached}".encode()).decode()
    first.write_text(f"{head}\n\n{text}--XX\nContent-Transfer-Encoding: base64\n\n{attachment}--XX--\n")

    for command in ("status", "apply"):
        assert f"{first.name}: git am reads other changes than its text shows" in one_error(synthetic.run(command))


def _mail(tmp_path, message: str):
    """A one-file patch in git format-patch's form with ``message`` (subject, blank line, body)."""
    subject, _, body = message.partition("\n\n")
    path = tmp_path / "0001-work-around.patch"
    path.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: A <a@example.com>\n"
        f"Date: Sun, 6 Dec 2026 06:57:04 +0000\nSubject: [PATCH] {subject}\n\n{body}\n---\n"
        " x.py | 1 +\n\ndiff --git a/x.py b/x.py\nnew file mode 100644\nindex 0000000..d00491f\n--- /dev/null\n"
        "+++ b/x.py\n@@ -0,0 +1 @@\n+1\n-- \n2.39.5\n"
    )
    return parse_patch(path)


@pytest.mark.parametrize(
    "trailers",
    [
        "Upstream-Status: Inappropriate [why]\n(cherry picked from commit 0123456789012345678901234567890123456789)",
        "Description: a workaround,\n over two lines\nUpstream-Status: Inappropriate [why]",
        "upstream-status: Inappropriate [why]",  # DEP-3's keys are case-insensitive
        "Upstream-Status:\tInappropriate [why]",
        "Upstream-Status:  Inappropriate [why]\nBug-Debian2: 1",
        "Upstream-Status: Inappropriate [why]\nBug: b\u2028c",
    ],
)
def test_a_patchs_trailers_are_those_git_reads(tmp_path, trailers):
    """`git interpret-trailers` reads them, for `status`, `forward` and the wheels' records alike."""
    patch = _mail(tmp_path, f"Work around\n\nBody.\n\n{trailers}")

    assert patch.trailer("Upstream-Status") == "Inappropriate [why]"


@pytest.mark.parametrize(
    ("trailers", "read"),
    [
        ("Upstream-Status: Inappropriate [why]\n\nSigned-off-by: A <a@example.com>", "0 of its 1"),  # not the last
        ("Upstream-Status: Inappropriate [why]\nSee the draft issue for why.", "0 of its 1"),  # a paragraph of prose
        ("Upstream-Status: Pending\nUpstream-Status: Inappropriate [why]", "2 of its 2"),
    ],
)
def test_a_status_line_git_does_not_read_as_the_one_status_trailer_is_refused(tmp_path, trailers, read):
    """Read as no status, such a release-only patch was forwarded to upstream."""
    patch = _mail(tmp_path, f"Work around\n\nBody.\n\n{trailers}")

    with pytest.raises(SeriesError, match=rf"git reads {read} Upstream-Status lines as a trailer; keep one"):
        patch.trailer("Upstream-Status")


def test_a_repositorys_trailer_settings_do_not_change_a_patchs_trailers(tmp_path, monkeypatch):
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "trailer.us.key", "Upstream-Status")  # git would read `us:` as `Upstream-Status:`
    monkeypatch.chdir(tmp_path)

    patch = _mail(tmp_path, "Work around\n\nBody.\n\nus: Inappropriate [why]\nBug: none")

    assert patch.trailers == [("us", "Inappropriate [why]"), ("Bug", "none")]


def test_a_subject_that_starts_like_a_status_is_no_status_line(tmp_path):
    patch = _mail(tmp_path, "Upstream-Status: keep the pin\n\nBody.\n\nUpstream-Status: Pending")

    assert patch.trailer("Upstream-Status") == "Pending"


def test_a_patch_file_without_its_from_line_is_read_as_git_am_reads_it(tmp_path):
    path = _mail(tmp_path, "Work around\n\nBody.\n\nUpstream-Status: Pending").path
    path.write_text(path.read_text().split("\n", 1)[1])

    assert parse_patch(path).trailer("Upstream-Status") == "Pending"


def test_a_patch_file_holding_a_diff_git_am_does_not_read_is_refused(synthetic):
    """A MIME preamble, which git mailinfo skips, holding a diff: git apply would read it, git am would not."""
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    head, _, body = first.read_text().partition("\n\n")
    decoy = (
        "diff --git a/src/fakelib/core.py b/src/fakelib/core.py\n--- a/src/fakelib/core.py\n+++ b/src/fakelib/core.py\n"
    )
    mime = '\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="XX"'
    first.write_text(f"{head}{mime}\n\n{decoy}@@ -1 +1 @@\n-x\n+x\n--XX\nContent-Type: text/plain\n\n{body}")

    for command in ("status", "apply"):
        assert f"{first.name}: git am reads other changes than its text shows" in one_error(synthetic.run(command))
