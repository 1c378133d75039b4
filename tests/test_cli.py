"""The command line as a user meets it: one-line errors, non-zero exits, progress lines, help."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TOOL, cli, git, one_error
from patchseries import __version__, gitcmd
from patchseries.cli import _parser, _workspace, main
from patchseries.errors import SeriesError
from patchseries.paths import PROJECT_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_apply_prints_progress_and_the_tree(synthetic):
    proc = synthetic.run("apply")

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("trees/sdist-1.0")
    assert "stage 3/5: applying 2 patches" in proc.stderr


def test_bad_input_is_one_line_and_exits_2(synthetic):
    (synthetic.ws.patches / "series").write_text("0001-nope.patch\n")

    proc = synthetic.run("apply")

    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("error: series names 0001-nope.patch")
    assert "Traceback" not in proc.stderr


def test_unknown_torch_is_refused_before_any_work(synthetic):
    proc = synthetic.run("test", "--torch", "banana")

    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: unknown torch version 'banana': expected a release number such as 2.13.0"
    )


def test_checkout_and_git_are_exclusive(synthetic, tmp_path):
    proc = synthetic.run("fetch", "--git", "--checkout", str(tmp_path))

    assert proc.returncode == 2
    assert "error: --checkout and --git are alternatives" in proc.stderr


def test_check_reports_drift_with_exit_1(synthetic):
    first = sorted(synthetic.ws.patches.glob("*.patch"))[0]
    first.write_text(first.read_text().replace("+    return 42", "+    return 43"))

    proc = synthetic.run("check")

    assert proc.returncode == 1
    assert f"drift: {first.name} differs from a fresh export" in proc.stdout


def test_unknown_torch_creates_nothing(synthetic, tmp_path):
    fresh = tmp_path / "fresh"

    proc = cli("test", "--torch", "abc", "--patches", str(synthetic.ws.patches), "--workdir", str(fresh))

    assert proc.returncode == 2
    assert "unknown torch version 'abc'" in proc.stderr
    assert not fresh.exists()


@pytest.mark.parametrize("option", ["--workdir", "--patches"])
def test_empty_path_option_is_refused_and_writes_nothing(synthetic, tmp_path, option):
    here = tmp_path / "here"
    here.mkdir()

    proc = cli("apply", "--patches", str(synthetic.ws.patches), option, "", cwd=here)

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: argument {option}: needs a path, not '' (blank, or with a control character); see {TOOL} apply --help"
    ]
    assert list(here.iterdir()) == []


PATH_OPTIONS = [
    ("fetch", "--workdir"), ("fetch", "--patches"), ("fetch", "--checkout"), ("export", "--tree"),
    ("check", "--checkout"), ("forward", "--to"), ("matrix", "--write-docs"), ("matrix", "--from-json"),
    ("wheels", "--dist"), ("test-wheels", "--dist"),
]  # fmt: skip


@pytest.mark.parametrize(("command", "option"), PATH_OPTIONS)
def test_every_path_option_refuses_a_control_character_before_any_work(synthetic, tmp_path, command, option):
    here = tmp_path / "here"
    here.mkdir()
    required = ("--checkout", str(synthetic.tree)) if command == "forward" else ()

    proc = cli(command, "--patches", str(synthetic.ws.patches), *required, option, str(tmp_path / "a\nb"), cwd=here)

    error = one_error(proc)
    assert error.startswith(f"error: argument {option}")
    assert f"needs a path, not '{tmp_path}/a\\nb' (blank, or with a control character)" in error
    assert list(here.iterdir()) == []
    assert not (tmp_path / "a\nb").exists()


@pytest.mark.parametrize("ref", ["", " ", "a\nb"])
def test_check_onto_refuses_an_empty_ref(synthetic, upstream_clone, ref):
    proc = synthetic.run("check", "--onto", ref, "--checkout", str(upstream_clone))

    assert one_error(proc).startswith(f"error: argument --onto: needs a name, not {ref!r}")


def test_test_wheels_takes_a_package_as_pip_spells_it():
    args = _parser().parse_args(["test-wheels", "--package", "pytorch-lightning", "--package", "Lightning.Fabric"])

    _workspace(args)

    assert args.package == ["pytorch_lightning", "lightning_fabric"]


def test_workdir_that_is_a_file_is_one_error_line(synthetic, tmp_path):
    (tmp_path / "afile").write_text("")

    proc = cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", str(tmp_path / "afile"))

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: the work directory {tmp_path / 'afile'} is a file; pass a directory as --workdir (made if missing)"
    ]


def test_a_workdir_that_is_a_link_loop_is_one_error_line(synthetic, tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")

    proc = cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", str(tmp_path / "loop"))

    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ")
    assert len(proc.stderr.splitlines()) == 1
    assert "loop" in proc.stderr


def test_a_series_folder_without_its_series_is_refused_not_passed_over_for_another(tmp_path):
    (tmp_path / "project" / "patches").mkdir(parents=True)  # git mv patches/series ...: this project's series is gone

    error = one_error(cli("status", cwd=tmp_path / "project"))

    assert f"{tmp_path / 'project' / 'patches'}" in error


def test_export_in_an_empty_workdir_is_one_error_line(synthetic, tmp_path):
    proc = cli("export", "--patches", str(synthetic.ws.patches), "--workdir", str(tmp_path / "empty"))

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: there is no tree to export at {tmp_path / 'empty' / 'edit' / 'sdist-1.0'}; make one to edit with "
        f"`{TOOL} edit --patches {synthetic.ws.patches} --workdir {tmp_path / 'empty'}`, or pass --tree"
    ]


def test_unwritable_workdir_is_one_error_line(synthetic, tmp_path, monkeypatch, capsys):
    readonly = tmp_path / "readonly"
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if readonly in (self, *self.parents):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)

    status = main(["apply", "--patches", str(synthetic.ws.patches), "--workdir", str(readonly / "work")])

    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: Permission denied: {readonly / 'work'}; check that path (permissions, free space, a process still "
        "using it) and re-run"
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only directory")
def test_read_only_workdir_is_one_error_line(synthetic, tmp_path):
    readonly = tmp_path / "readonly"
    readonly.mkdir(mode=0o555)

    proc = cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", str(readonly / "work"))

    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    assert "Permission denied" in proc.stderr


def test_os_error_while_working_is_one_error_line(synthetic, monkeypatch, capsys):
    # what a re-run met while the installer of a killed run still wrote into the environment it removes
    def busy(*args, **kwargs):
        raise OSError(errno.ENOTEMPTY, "Directory not empty", "/w/venvs/py3.11-torch2.13.0-sdist")

    monkeypatch.setattr("patchseries.job.get_source", busy)

    status = main(["fetch", "--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir)])

    assert status == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: Directory not empty: /w/venvs/py3.11-torch2.13.0-sdist; check that path")


def test_help_describes_the_tool_not_its_code():
    proc = cli("--help")

    assert proc.returncode == 0
    assert "argparse" not in proc.stdout
    assert "Apply the patch series in patches/ to the pinned PyTorch Lightning release" in proc.stdout
    assert "PATCHSERIES_WORKDIR" in proc.stdout
    assert "built fresh per base and series" in proc.stdout


DOCUMENTED = {  # docs/options.md and docs/contributors.md: each subcommand and the options they name for it
    "fetch": ["--patches", "--workdir", "--checkout", "--git", "--force-base"],
    "apply": ["--patches", "--workdir", "--checkout", "--git", "--force-base"],
    "edit": ["--patches", "--workdir", "--checkout", "--git", "--force-base"],
    "test": ["--patches", "--workdir", "--checkout", "--git", "--force-base", "--torch", "--installer"],
    "export": ["--patches", "--workdir", "--tree", "--branch", "--drop-missing", "--author"],
    "check": ["--patches", "--workdir", "--onto", "--checkout"],
    "forward": ["--patches", "--workdir", "--checkout", "--to", "--author"],
    "status": ["--patches", "--workdir"],
    "matrix": ["--patches", "--workdir", "--torch", "--installer", "--write-docs", "--write-readme", "--from-json"],
    "wheels": ["--patches", "--workdir", "--dist"],
    "test-wheels": ["--patches", "--workdir", "--dist", "--torch", "--package", "--installer"],
}  # fmt: skip


@pytest.mark.parametrize("command", DOCUMENTED)
def test_each_subcommand_takes_the_documented_options(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])

    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert [option for option in DOCUMENTED[command] if option not in shown] == []


def test_the_overview_lists_every_subcommand_once(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])

    lines = capsys.readouterr().out.splitlines()
    listed = [line.split()[0] for line in lines if line.startswith("    ") and not line.startswith("     ")]
    assert listed == list(DOCUMENTED)


def test_main_job_help_describes_the_job_the_workdir_variable_and_pytest_arguments():
    env = {**os.environ, "PATCHSERIES_PROG": "scripts/apply_and_test.sh"}

    proc = cli("test", "--help", env=env)

    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: scripts/apply_and_test.sh ")
    assert "The main job, in five stages" in proc.stdout
    assert "PATCHSERIES_WORKDIR" in proc.stdout
    assert "pytest arguments go after --" in proc.stdout


def test_pytest_option_before_dash_dash_points_to_it():
    env = {**os.environ, "PATCHSERIES_PROG": "scripts/apply_and_test.sh"}

    proc = cli("test", "-x", env=env)

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: unrecognized arguments: -x; pytest arguments go after --, e.g. scripts/apply_and_test.sh -- -x"
    ]


def test_version_is_the_package_version():
    proc = cli("--version")

    assert proc.returncode == 0
    assert proc.stdout.strip() == f"patchseries {__version__}"
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == __version__


def test_closed_pipe_is_not_a_traceback(synthetic):
    command = [sys.executable, "-m", "patchseries", "status", "--patches", str(synthetic.ws.patches)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # like `| head` that has read enough

    stderr = proc.stderr.read()
    proc.wait()

    assert stderr == ""
    assert proc.returncode == 141


def _empty_repository(path):
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def test_a_git_failure_names_gits_own_error_not_its_usage_line(tmp_path):
    repo = _empty_repository(tmp_path / "empty")

    with pytest.raises(SeriesError) as raised:
        gitcmd.out("rev-parse", "HEAD", cwd=repo)

    assert str(raised.value).startswith("git rev-parse HEAD failed: fatal: ambiguous argument 'HEAD'")
    assert "git <command>" not in str(raised.value)


def test_apply_on_an_empty_checkout_says_it_has_no_commits(synthetic, tmp_path):
    empty = _empty_repository(tmp_path / "empty")

    proc = synthetic.run("apply", "--checkout", str(empty))

    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        f"error: --checkout {empty} has no commits; pass a clone of upstream that has the tag 1.0"
    )


def test_export_from_a_tree_without_a_base_branch_says_so(synthetic, tmp_path):
    tree = _empty_repository(tmp_path / "tree")
    subprocess.run(["git", "-C", str(tree), "checkout", "-q", "-b", "series"], check=True)
    env = ["-c", "user.name=A", "-c", "user.email=a@invalid"]
    subprocess.run(["git", "-C", str(tree), *env, "commit", "-q", "--allow-empty", "-m", "x"], check=True)

    proc = synthetic.run("export", "--tree", str(tree))

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: {tree} has no branch 'base' to export the series against; export from a tree that `{TOOL} edit "
        f"--patches {synthetic.ws.patches} --workdir {synthetic.ws.workdir}` made (its branch base is the pinned "
        "release)"
    ]


def test_check_onto_with_a_checkout_that_is_not_a_git_checkout_says_so(synthetic, tmp_path):
    (tmp_path / "plain").mkdir()

    proc = synthetic.run("check", "--onto", "master", "--checkout", str(tmp_path / "plain"))

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"error: --checkout {tmp_path / 'plain'} is not a git checkout"]


def test_forward_of_a_series_pinned_to_a_commit_names_the_release_series(synthetic, upstream_clone):
    forward_dir = synthetic.ws.patches / "master"
    forward_dir.mkdir()
    for patch in synthetic.ws.patches.glob("*.patch"):
        (forward_dir / patch.name).write_bytes(patch.read_bytes())
    (forward_dir / "series").write_bytes(synthetic.ws.series_file.read_bytes())
    head = subprocess.run(["git", "-C", str(upstream_clone), "rev-parse", "HEAD"], capture_output=True, text=True)
    (forward_dir / "base.toml").write_text(
        '[base]\nname = "fakelib"\nversion = "master"\ngit_url = "https://git.invalid/fakelib.git"\n'
        f'commit = "{head.stdout.strip()}"\n'
    )

    proc = cli(
        "forward",
        "--patches",
        str(forward_dir),
        "--checkout",
        str(upstream_clone),
        "--workdir",
        str(synthetic.ws.workdir),
    )

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: {forward_dir} is a forward series (its base.toml pins upstream commit {head.stdout.strip()[:12]}, "
        "not a release); forward re-makes a release series: pass --patches DIR of the release series, whose "
        "forward series is DIR/master"
    ]


@pytest.mark.parametrize("value", [" ", "/tmp/a\nb"], ids=["blank", "newline"])
def test_a_blank_or_control_character_workdir_variable_is_refused_and_makes_nothing(synthetic, tmp_path, value):
    """``PATCHSERIES_WORKDIR=" "`` makes no directory named " " in the current directory; a newline, none split."""
    here = tmp_path / "here"
    here.mkdir()

    env = {**os.environ, "PATCHSERIES_WORKDIR": value}

    proc = cli("apply", "--patches", str(synthetic.ws.patches), cwd=here, env=env)

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: PATCHSERIES_WORKDIR={value!r} is blank or has a control character; set it to a directory, or unset "
        "it to use .work/ beside patches/"
    ]
    assert list(here.iterdir()) == []


@pytest.mark.parametrize("inside", [".", "src/fakelib"])
def test_a_workdir_inside_a_persons_git_tree_is_refused_and_the_tree_left(synthetic, inside):
    """``PATCHSERIES_WORKDIR=.work/edit/<base>`` never writes downloads/ and trees/ into the edit tree."""
    workdir = (synthetic.tree / inside).resolve()
    before = sorted(str(path.relative_to(synthetic.tree)) for path in synthetic.tree.rglob("*"))
    env = {**os.environ, "PATCHSERIES_WORKDIR": str(workdir)}

    proc = cli("apply", "--patches", str(synthetic.ws.patches), env=env)

    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: the work directory {workdir} is inside the git tree {synthetic.tree}, which does not ignore it and "
        "may be yours: the tool would write downloads/ and trees/ among its files; it comes from PATCHSERIES_WORKDIR: "
        "set that to a folder outside it, or unset it"
    ]
    assert sorted(str(path.relative_to(synthetic.tree)) for path in synthetic.tree.rglob("*")) == before


@pytest.mark.parametrize(("workdir", "refused"), [(".work", False), (".", True), ("src", True)])
def test_a_workdir_in_a_git_tree_is_used_only_where_that_tree_ignores_it(synthetic, tmp_path, workdir, refused):
    """As the project's own ``.work/``: a clone whose .gitignore lists the folder; its files are never written."""
    clone = tmp_path / "clone"
    (clone / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    (clone / ".gitignore").write_text("/.work/\n")

    proc = cli("fetch", "--patches", str(synthetic.ws.patches), "--workdir", str(clone / workdir))

    assert proc.returncode == (2 if refused else 0), proc.stderr
    made = sorted(path.name for path in clone.iterdir())
    assert made == ([".git", ".gitignore", "src"] if refused else [".git", ".gitignore", ".work", "src"])


@pytest.mark.parametrize(("given", "torch"), [("2.13", "2.13.0"), ("2.13.0", "2.13.0"), ("2.4", "2.4.0")])
def test_a_release_without_its_patch_number_is_its_full_number(synthetic, monkeypatch, given, torch):
    """``--torch 2.13`` is 2.13.0: no second environment (``torch2.13``) beside 2.13.0's."""
    seen = []

    def main_job(ws, choice, version, *args, **kwargs):
        seen.append(version)
        raise KeyboardInterrupt

    monkeypatch.setattr("patchseries.job.run_main_job", main_job)

    main(["test", "--torch", given, "--patches", str(synthetic.ws.patches), "--workdir", str(synthetic.ws.workdir)])

    assert seen == [torch]


def test_matrix_runs_each_release_once_by_its_full_number(synthetic, monkeypatch):
    seen = []
    monkeypatch.setattr("patchseries.matrix.run_matrix", lambda ws, versions, *a, **k: seen.append(versions) or [])

    main(["matrix", "--torch", "2.13", "--torch", "2.13.0", "--torch", "2.4", "--patches", str(synthetic.ws.patches),
          "--workdir", str(synthetic.ws.workdir)])  # fmt: skip

    assert seen == [["2.13.0", "2.4.0"]]


def test_fetch_prints_the_tree_the_docs_say_it_makes(synthetic):
    options = (Path(__file__).parents[1] / "docs" / "options.md").read_text()
    proc = synthetic.run("fetch")

    assert proc.returncode == 0
    assert proc.stdout.strip() == str(synthetic.ws.trees / "sdist-1.0")
    assert "`fetch` (the base only)" not in options
    assert "`fetch` (the base with the series applied" in options


def test_a_workdir_in_a_repository_that_ignores_only_downloads_is_refused(synthetic, tmp_path):
    repo = tmp_path / "mine"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("work/downloads/\n")

    error = one_error(cli("apply", "--patches", str(synthetic.ws.patches), "--workdir", str(repo / "work")))

    assert "does not ignore it" in error
    assert not (repo / "work").exists()


@pytest.mark.parametrize("refused", ["inside a git tree", "a file"])
def test_a_refused_patchseries_workdir_is_named_as_the_variable(synthetic, tmp_path, refused):
    workdir = synthetic.tree if refused == "inside a git tree" else tmp_path / "afile"
    if refused == "a file":
        workdir.write_text("")
    env = {**os.environ, "PATCHSERIES_WORKDIR": str(workdir)}

    error = one_error(cli("apply", "--patches", str(synthetic.ws.patches), env=env))

    assert "it comes from PATCHSERIES_WORKDIR: set that to a" in error
    assert "--workdir" not in error  # no option was passed: the variable is what to change


def test_patches_that_is_a_file_says_it_is_not_a_directory(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")

    for command in ("check", "status"):
        error = one_error(cli(command, "--patches", str(afile), "--workdir", str(tmp_path / "work")))

        assert error.startswith(f"error: --patches {afile} is not a directory;"), error
        assert "check that path" not in error


def test_a_failed_git_command_is_named_by_its_subcommand(tmp_path):
    with pytest.raises(SeriesError, match=r"^git format-patch --zero-commit x failed: fatal: "):
        gitcmd.git("-c", "a.b=c", "-c", "d.e=f", "format-patch", "--zero-commit", "x", "y", cwd=tmp_path)


def test_a_run_from_a_folder_that_no_longer_exists_is_one_refusal(synthetic, tmp_path):
    (gone := tmp_path / "gone").mkdir()
    run = "import os, runpy, sys; os.rmdir(os.getcwd()); sys.argv[0] = 'patchseries'; runpy.run_module('patchseries')"

    proc = subprocess.run([sys.executable, "-c", run, "status", "--patches", str(synthetic.ws.patches)], cwd=gone,
                          capture_output=True, text=True, check=False)  # fmt: skip

    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: the current directory no longer exists")
