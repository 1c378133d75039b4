"""Commit messages and patches that are not UTF-8 (a Latin-1 ``é``) go through every command without a traceback."""

from __future__ import annotations

import subprocess

from conftest import git, one_error

LATIN1_MESSAGE = "Fix the r\xe9sum\xe9 answer\n\nCaf\xe9 body.\n\nUpstream-Status: Pending\n".encode("latin-1")
LATIN1_SOURCE = "# caf\xe9, in Latin-1\nVERSION = '1.0.1'\n".encode("latin-1")


def _latin1_commit(tree):
    """A commit whose message and changed file are Latin-1 bytes, without an encoding header (as an editor set to
    Latin-1 makes it)."""
    (tree / "src/fakelib/__init__.py").write_bytes(LATIN1_SOURCE)
    git(tree, "add", "src/fakelib/__init__.py")
    env_args = ["-c", "user.name=Test Author", "-c", "user.email=author@example.com"]
    subprocess.run(["git", *env_args, "commit", "-q", "-F", "-"], cwd=tree, input=LATIN1_MESSAGE, check=True)


def test_a_patch_and_a_commit_message_that_are_not_utf8_go_through_every_command(synthetic, upstream_clone):
    """Export, apply, check, check --onto and forward each take a commit, or a patch, carrying a Latin-1 ``é``."""
    _latin1_commit(synthetic.tree)

    exported = synthetic.run("export", "--tree", str(synthetic.tree))

    assert exported.returncode == 0, exported.stderr
    patch = synthetic.ws.patches / "0003-Fix-the-r-sum-answer.patch"
    assert b"+# caf\xe9, in Latin-1\n" in patch.read_bytes()  # the file's bytes, not replaced
    assert "Café body." in patch.read_bytes().decode("utf-8", "replace")  # git re-encodes a message, as always
    written = patch.read_bytes()
    forward_dir = synthetic.ws.patches / "master"
    forward_dir.mkdir()
    (forward_dir / "base.toml").write_text(
        '[base]\nname = "fakelib"\nversion = "master"\ngit_url = "https://git.invalid/fakelib.git"\n'
        f'commit = "{git(upstream_clone, "rev-parse", "HEAD")}"\n'
    )
    for args in (
        ["check"],  # the drift check of the release series only: the forward series is not written yet
        ["check", "--onto", "1.0", "--checkout", str(upstream_clone)],
        ["apply"],
        ["status"],
        ["forward", "--checkout", str(upstream_clone), "--author", "A U Thor <a@example.com>"],
        ["export", "--tree", str(synthetic.tree)],
        ["check", "--checkout", str(upstream_clone)],
    ):
        proc = synthetic.run(*args)

        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    assert patch.read_bytes() == written  # a re-export is byte for byte the same
    assert b"+# caf\xe9, in Latin-1\n" in (forward_dir / "0003-Fix-the-r-sum-answer.patch").read_bytes()
    assert (synthetic.tree / "src/fakelib/__init__.py").read_bytes() == LATIN1_SOURCE


def test_a_series_file_that_is_not_utf8_is_one_error_line(synthetic):
    synthetic.ws.series_file.write_bytes(synthetic.ws.series_file.read_bytes() + b"0003-caf\xe9.patch\n")

    proc = synthetic.run("status")

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: {synthetic.ws.series_file} is not UTF-8 text (invalid continuation byte at byte "
        f"{len(synthetic.ws.series_file.read_bytes()) - 8}); list the patch file names in UTF-8"
    ]


def test_export_with_an_author_keeps_a_latin1_message_and_file(synthetic, tmp_path):
    """``--author`` re-commits each commit from its raw text (``git cat-file commit``), which is Latin-1 here."""
    _latin1_commit(synthetic.tree)

    proc = synthetic.run("export", "--tree", str(synthetic.tree), "--author", "A U Thor <a@example.com>")

    assert proc.returncode == 0, proc.stderr
    text = (synthetic.ws.patches / "0003-Fix-the-r-sum-answer.patch").read_bytes()
    assert b"From: A U Thor <a@example.com>\n" in text
    assert b"+# caf\xe9, in Latin-1\n" in text


def test_a_series_file_that_is_not_utf8_is_one_error_line_for_export(synthetic):
    with (synthetic.ws.patches / "series").open("ab") as series:
        series.write(b"# caf\xe9\n")

    error = one_error(synthetic.run("export"))

    assert "is not UTF-8 text" in error
    assert "Traceback" not in synthetic.run("export").stderr
