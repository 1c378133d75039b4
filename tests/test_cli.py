"""The command line as a user meets it: one-line errors, non-zero exits, progress lines."""

from __future__ import annotations


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
