"""Getting the pinned base: sdist verification, a reproducible base commit, checkouts left untouched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import RELEASE_FILES, between, cli, git, make_base, make_sdist, one_error, shell, write_pin
from patchseries.cli import main
from patchseries.errors import SeriesError
from patchseries.interrupts import write_file
from patchseries.paths import Workspace
from patchseries.pin import load_pin


def _workspace(tmp_path, name="work"):
    return Workspace(patches=tmp_path / "patches", workdir=tmp_path / name)


def test_base_commit_is_the_same_on_every_run(tmp_path):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))
    pin = load_pin(tmp_path / "patches" / "base.toml")

    first = make_base(_workspace(tmp_path, "one"), pin)
    second = make_base(_workspace(tmp_path, "two"), pin)

    assert first.base_commit == second.base_commit
    assert git(first.path, "log", "-1", "--format=%an %ae %ad %cn %cd", "--date=iso") == (
        "patchseries patchseries@invalid 2026-01-01 00:00:00 +0000 patchseries 2026-01-01 00:00:00 +0000"
    )


def test_the_base_is_owned_by_whoever_runs_the_tool_never_the_packager(tmp_path):
    """Run as root, tarfile chowned the files to the sdist's uid, and git refused the tree ("dubious ownership")."""
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))

    tree = make_base(_workspace(tmp_path), load_pin(tmp_path / "patches" / "base.toml"))

    assert {path.stat().st_uid for path in tree.path.rglob("*") if ".git" not in path.parts} == {os.getuid()}


def test_sha256_mismatch_is_refused_and_nothing_is_kept(tmp_path):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES), sha256="0" * 64)
    ws = _workspace(tmp_path)

    with pytest.raises(SeriesError, match="sha256 mismatch for fakelib-1.0.tar.gz"):
        make_base(ws, load_pin(ws.pin_file))

    assert list(ws.downloads.iterdir()) == []
    assert not ws.trees.exists() or list(ws.trees.iterdir()) == []


@pytest.mark.parametrize("url", ["https://exa mple.invalid/x.tar.gz"])
def test_an_sdist_url_python_cannot_open_is_one_error_line(tmp_path, url):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES), url=url)
    ws = _workspace(tmp_path)

    with pytest.raises(SeriesError, match=rf"^cannot download {url}: "):
        make_base(ws, load_pin(ws.pin_file))


def test_unexpected_base_commit_is_refused(tmp_path):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES), base_commit="f" * 40)
    ws = _workspace(tmp_path)

    with pytest.raises(SeriesError, match="the pin expects ffffffffffff"):
        make_base(ws, load_pin(ws.pin_file))
    assert not ws.trees.exists() or list(ws.trees.iterdir()) == []


def test_a_killed_runs_scratch_is_no_obstacle(tmp_path):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))
    ws = _workspace(tmp_path)
    leftover = ws.scratch / "sdist-1.0-killed"  # as a killed run leaves it: the next run's clean-up removes it
    leftover.mkdir(parents=True)
    (leftover / "junk").write_text("left by a killed run")

    tree = make_base(ws, load_pin(ws.pin_file))

    assert (tree.path / "src" / "fakelib" / "core.py").is_file()
    assert sorted(path.name for path in ws.trees.iterdir()) == ["sdist-1.0"]


def test_a_file_of_anyones_beside_the_download_is_never_written_through(tmp_path):
    """The download is made in the run's scratch folder: a ``.partial`` link beside it (a name older versions used) is
    left as it is, its target too."""
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))
    ws = _workspace(tmp_path)
    mine = tmp_path / "mine.txt"
    mine.write_text("a file of mine\n")
    ws.downloads.mkdir(parents=True)
    (ws.downloads / "fakelib-1.0.tar.gz.partial").symlink_to(mine)
    record = tmp_path / "record"
    Path(f"{record}.partial").symlink_to(mine)

    make_base(ws, load_pin(ws.pin_file))
    write_file(record, "the record\n")

    assert (ws.downloads / "fakelib-1.0.tar.gz.partial").is_symlink()
    assert Path(f"{record}.partial").is_symlink()
    assert mine.read_text() == "a file of mine\n"
    assert record.read_text() == "the record\n"


def _snapshot(repo):
    return git(repo, "status", "--porcelain", "--ignored"), git(repo, "show-ref"), git(repo, "rev-parse", "HEAD")


def test_checkout_at_the_tag_is_cloned_and_left_untouched(tmp_path, upstream_clone):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))
    ws = _workspace(tmp_path)
    before = _snapshot(upstream_clone)

    tree = make_base(ws, load_pin(ws.pin_file), upstream_clone)

    assert tree.path != upstream_clone
    assert tree.base_commit == git(upstream_clone, "rev-parse", "HEAD")
    assert _snapshot(upstream_clone) == before


def test_dirty_checkout_is_refused(tmp_path, upstream_clone):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))
    (upstream_clone / "src" / "fakelib" / "core.py").write_text("edited\n")

    with pytest.raises(SeriesError, match="has uncommitted changes"):
        make_base(_workspace(tmp_path), load_pin(tmp_path / "patches" / "base.toml"), upstream_clone, force=False)


def test_checkout_at_another_commit_needs_force_base(tmp_path, upstream_clone):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))
    pin = load_pin(tmp_path / "patches" / "base.toml")
    git(upstream_clone, "commit", "-q", "--allow-empty", "-m", "later")

    with pytest.raises(SeriesError, match="but tag 1.0 is .*; check out 1.0 or pass --force-base"):
        make_base(_workspace(tmp_path), pin, upstream_clone, force=False)
    forced = make_base(_workspace(tmp_path), pin, upstream_clone, force=True)
    assert forced.base_commit == git(upstream_clone, "rev-parse", "HEAD")


def test_git_source_without_network_says_so(tmp_path):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES), git_url="https://unreachable.invalid/x.git")
    ws = _workspace(tmp_path)

    with pytest.raises(SeriesError, match=r"cannot clone .* \(is it reachable from here\?\)"):
        make_base(ws, load_pin(ws.pin_file), use_git=True)
    assert not ws.trees.exists() or list(ws.trees.iterdir()) == []


def test_not_a_checkout_is_refused(tmp_path):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))
    with pytest.raises(SeriesError, match="is not a git checkout"):
        make_base(_workspace(tmp_path), load_pin(tmp_path / "patches" / "base.toml"), tmp_path, force=False)


def test_unknown_pin_key_is_reported(tmp_path):
    (tmp_path / "base.toml").write_text("[base]\nname = 'x'\n")
    with pytest.raises(SeriesError, match="lacks the key"):
        load_pin(tmp_path / "base.toml")


def test_checkout_index_is_left_byte_for_byte(tmp_path, upstream_clone):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))
    core = upstream_clone / "src" / "fakelib" / "core.py"
    later = core.stat().st_mtime + 10
    os.utime(core, (later, later))  # same content, new stat data: `git status` would rewrite the index
    index = (upstream_clone / ".git" / "index").read_bytes()

    make_base(_workspace(tmp_path), load_pin(tmp_path / "patches" / "base.toml"), upstream_clone, force=False)

    assert (upstream_clone / ".git" / "index").read_bytes() == index


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("url = \"file:", "url = \"not a url\"\n#"),
         "[sdist] url is not a URL (https://... or file://...): 'not a url'"),
        (("[base]\n", "base = \"lightning\"\n[old]\n"), "[base] is not a table ([base] with name, version, ...)"),
        (('release_date = "2026-01-01"', 'release_date = "2026-02-30"'),
         "[base] release_date is not a date such as 2026-09-10: '2026-02-30'"),
        (('lacks = ["tests/", "docs/"]', 'lacks = "docs/"'), "[sdist] lacks is not a list of paths: 'docs/'"),
        (('version = "1.0"', "version = 1.0"), "[base] version is not a string: 1.0"),
    ],
)  # fmt: skip
def test_a_bad_pin_is_one_error_line_and_creates_nothing(synthetic, tmp_path, edit, message):
    pin_file = synthetic.ws.pin_file
    pin_file.write_text(pin_file.read_text().replace(*edit, 1))

    proc = cli("fetch", "--patches", str(synthetic.ws.patches), "--workdir", str(tmp_path / "fresh"))

    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"error: pin file {pin_file}: {message}"]
    assert not (tmp_path / "fresh" / "trees").exists()


def _unpacking_fills_the_disk(monkeypatch):
    def full_disk(archive, dest):  # what a file's write() raises when the disk fills up: no path in it
        (dest / "half-unpacked").write_text("x")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("patchseries.trees.safe_extract", full_disk)
    return ""


def test_disk_full_while_unpacking_the_sdist_is_one_short_line_and_leaves_no_partial_tree(
    synthetic, tmp_path, monkeypatch, capsys
):
    """The unpacked files are renamed into the tree, on the same disk: only unpacking can fill it."""
    more = _unpacking_fills_the_disk(monkeypatch)
    workdir = tmp_path / "fresh"

    status = main(["fetch", "--patches", str(synthetic.ws.patches), "--workdir", str(workdir)])

    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[patchseries ")]
    assert status == 2
    assert len(err) == 1
    assert len(err[0]) < 400
    assert err[0].startswith(f"error: No space left on device: {workdir}")  # the path to check, not "that path"
    assert more in err[0]
    assert list((workdir / "trees").glob("*")) == []
    assert list(workdir.rglob("half-*")) == []


def test_a_failure_while_committing_the_base_leaves_no_partial_tree(tmp_path, monkeypatch):
    write_pin(tmp_path / "patches", make_sdist(tmp_path, RELEASE_FILES))
    ws = _workspace(tmp_path)

    def no_space(path, pin):
        raise SeriesError("git commit --quiet --no-verify failed: fatal: unable to write new index file")

    monkeypatch.setattr("patchseries.trees._init_fixed_commit", no_space)

    with pytest.raises(SeriesError, match="unable to write new index file"):
        make_base(ws, load_pin(ws.pin_file))
    assert not ws.trees.exists() or list(ws.trees.iterdir()) == []


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('sha256 = "', 'sha256 = "0123456789ab"\n#'),
         "[sdist] sha256 is not 64 hexadecimal digits (a sha256 digest): '0123456789ab'"),
        (('base_commit = ""', 'base_commit = "not-a-commit"'),
         "[sdist] base_commit must be a full 40-hex commit id, not 'not-a-commit'"),
        (('base_commit = ""', 'base_comit = ""'),
         "[sdist] has the unknown key 'base_comit'; known: url, sha256, root, base_commit, lacks"),
        (("[sdist]\n", "[extra]\nx = 1\n\n[sdist]\n"), "has the unknown table '[extra]'; known: base, sdist, wheels"),
        (('release_date = "2026-01-01"', "release_date = 2026-01-01"),
         '[base] release_date is not a string: 2026-01-01 (a TOML date; quote it: "2026-01-01")'),
        (('version = "1.0"', 'version = "../1.0"'),
         "[base] version is not a name such as 2.6.6 (letters, digits, '.', '_', '+', '-'): '../1.0'"),
        (('tag = "1.0"', 'tag = ""'), "[base] tag is empty"),
    ],
)  # fmt: skip
def test_a_bad_pin_is_refused_in_full_before_the_work_directory_is_made(synthetic, tmp_path, edit, message):
    """A short sha256, a malformed commit id, a misspelled key (which would turn a check off), an unknown table and a
    TOML date are each refused in one line before the work directory is made."""
    pin_file = synthetic.ws.pin_file
    pin_file.write_text(pin_file.read_text().replace(*edit, 1))

    for command in ("fetch", "apply", "export", "check"):
        proc = cli(command, "--patches", str(synthetic.ws.patches), "--workdir", str(tmp_path / "fresh"))

        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == [f"error: pin file {pin_file}: {message}"]
        assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("cached", [True, False])
def test_the_pinned_sha256_is_checked_when_the_tree_exists(synthetic, cached):
    """A wrong sha256 in the pin is noticed also once the tree exists."""
    assert synthetic.run("apply").returncode == 0
    tool_tree = synthetic.ws.trees / "sdist-1.0"
    base = git(tool_tree, "rev-parse", "base")
    download = synthetic.ws.downloads / synthetic.sdist.name
    if not cached:
        download.unlink()
    pin_file = synthetic.ws.pin_file
    actual = load_pin(pin_file).sdist_sha256
    pin_file.write_text(pin_file.read_text().replace(actual, "f" * 64))

    proc = synthetic.run("fetch")

    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].startswith(f"error: sha256 mismatch for {synthetic.sdist.name}: ")
    assert "f" * 64 in errors[0]
    assert actual in errors[0]
    assert git(tool_tree, "rev-parse", "base") == base
    assert download.is_file() == cached


def test_the_kept_download_is_checked_on_every_run(synthetic):
    assert synthetic.run("apply").returncode == 0
    download = synthetic.ws.downloads / synthetic.sdist.name
    with download.open("ab") as handle:
        handle.write(b"x")

    for command in ("apply", "fetch", "check"):
        error = one_error(synthetic.run(command))
        assert "sha256 mismatch" in error
    kept = download.read_bytes()  # it may be a file of the person's (a --workdir of theirs): moved, never removed
    assert shell(between(error, "mv ")).returncode == 0
    assert synthetic.run("apply").returncode == 0
    assert download.with_name(download.name + ".mine").read_bytes() == kept


def test_a_git_url_that_looks_like_an_option_is_a_url(synthetic):
    pin = synthetic.ws.pin_file
    pin.write_text(pin.read_text().replace('git_url = "https://git.invalid/fakelib.git"', 'git_url = "--bare"'))

    error = one_error(synthetic.run("fetch", "--git"))

    assert "cannot clone --bare" in error
    assert ".partial' does not exist" not in error  # the folder it was cloning into, taken for the repository
    assert not (synthetic.ws.trees / "git-1.0").exists()


def test_an_sdist_that_ships_a_git_directory_is_refused(synthetic, tmp_path):
    ran = tmp_path / "ran"
    files = {
        **RELEASE_FILES, ".git/HEAD": "ref: refs/heads/main\n",
        ".git/config": f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch {ran}; false\n",
    }  # fmt: skip
    (tmp_path / "evil").mkdir()
    write_pin(synthetic.ws.patches, make_sdist(tmp_path / "evil", files))
    fresh = tmp_path / "fresh"

    error = one_error(cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", str(fresh)))

    assert "contains a git directory entry 'fakelib-1.0/.git/" in error
    assert not ran.exists()
    assert not (fresh / "trees" / "sdist-1.0").exists()
