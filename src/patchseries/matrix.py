"""The torch matrix: the series' tests before and after the series, and compile statistics, on each torch release;
saved as JSON, rendered as docs/compatibility.md's table. A failing release never stops the others."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchseries import acceptance
from patchseries.atomic import write_file
from patchseries.base import base_worktree
from patchseries.changed_lines import ChangedLines, added_lines, line_hits, measure, merge
from patchseries.environment import Environment, ensure_environment
from patchseries.errors import SeriesError
from patchseries.gitcmd import add_excludes, git
from patchseries.harness import write_harness
from patchseries.paths import PROJECT_ROOT, Workspace, project_root
from patchseries.pipeline import BaseChoice, Prepared, prepare
from patchseries.progress import Log
from patchseries.testrun import changed_source_files, junit_cases, run_tests
from patchseries.trees import BASE_REF, recording
from patchseries.wheels import TORCH_NEWEST_PATCH

# the newest patch release of every minor release Lightning 2.6.6 supports
DEFAULT_VERSIONS = tuple(f"{major}.{minor}.{patch}" for (major, minor), patch in TORCH_NEWEST_PATCH.items())
TABLE_START, TABLE_END = "<!-- matrix:start -->", "<!-- matrix:end -->"
# without the series, test modules that import what it adds fail to import: reported, and the run goes on
_BEFORE_ARGS = ("-q", "--continue-on-collection-errors")
_COMPILE_HEAD = """
Compile statistics with the series (`benchmarks/toggle_cost.py --backend aot_eager`, a two-optimizer GAN):
graphs / graph breaks / recompiles after warm-up / model matmuls captured in graphs.

| torch | no toggling | toggle + untoggle | `toggled_optimizer` | `with toggle_optimizer` |
|---|---|---|---|---|"""


@dataclass
class Row:
    torch: str
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    compile: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    changed_lines: dict[str, Any] = field(default_factory=dict)  # ChangedLines.to_dict() of the "after" run


def run_matrix(ws: Workspace, versions: list[str], log: Log, installer: str = "auto") -> list[Row]:
    prepared = prepare(ws, BaseChoice(), log)  # the tool's tree, as built from patches/
    tree, rows = prepared.base.path, [Row(torch=version) for version in versions]
    with recording(tree):  # what installing and testing make in the tree is the tool's
        before_tree, tests = _tree_without_series(ws, prepared), prepared.test_modules()
        sources = changed_source_files([c.path for p in prepared.patches for c in p.changes])
        added = added_lines(tree, BASE_REF, "HEAD")
        for number, row in enumerate(rows, 1):
            log(f"matrix {number}/{len(versions)}: torch {row.torch}")
            try:
                env = ensure_environment(ws, tree, row.torch, log, installer=installer)
            except SeriesError as exc:
                row.error = str(exc)
                log(f"torch {row.torch}: {exc}")
                continue
            reports = ws.reports / "matrix" / row.torch
            log(f"torch {row.torch}: the series' tests without the series")
            before = run_tests(env, before_tree, tests, [], reports / "before", _BEFORE_ARGS, before_tree / "src")
            row.before = results_by_module(before.junit)
            log(f"torch {row.torch}: the series' tests with the series")
            after = run_tests(env, tree, tests, sources, reports / "after", ("-q",))
            row.after = results_by_module(after.junit)
            if after.coverage_xml is not None:
                row.changed_lines = measure(added, line_hits(after.coverage_xml)).to_dict()
            row.compile = _probe(env, log, row.torch)
    measured = [ChangedLines.from_dict(row.changed_lines) for row in rows if row.changed_lines]
    if measured:
        merge(measured).write(ws.reports / "matrix", f"Changed lines covered on any of torch {', '.join(versions)}")
    return rows


def refresh_compile_stats(ws: Workspace, rows: list[Row], log: Log, installer: str = "auto") -> None:
    """Measure the compile statistics of saved rows again (after a change to the probe), keeping their test results."""
    tree = prepare(ws, BaseChoice(), log).base.path
    with recording(tree):
        for row in (row for row in rows if not row.error):
            env = ensure_environment(ws, tree, row.torch, log, installer=installer)
            row.compile = _probe(env, log, row.torch)


def results_by_module(junit: Path) -> dict[str, str]:
    """``{"test_x": "9 passed, 1 xfailed"}`` per test module, from a JUnit report."""
    if not junit.exists():
        return {"(no report)": "error: pytest produced no report"}
    tallies: dict[str, Counter[str]] = {}
    for case in junit_cases(junit):
        # a module that fails to import is reported with an empty class name and the module path as its name
        tallies.setdefault((case.classname or case.name or "?").rsplit(".", 1)[-1], Counter())[case.outcome] += 1
    order = ("failed", "passed", "xfailed", "skipped")
    return {m: ", ".join(f"{c[o]} {o}" for o in order if c[o]) for m, c in sorted(tallies.items())}


def to_json(rows: list[Row], today: dt.date | None = None) -> str:
    return json.dumps({"made_on": (today or dt.date.today()).isoformat(), "rows": [asdict(r) for r in rows]}, indent=2)


def from_json(text: str, source: str = "matrix.json") -> tuple[list[Row], dt.date]:
    """The rows and date of a saved matrix; anything a run would not have written is refused in one line."""
    where, rows = "", []
    try:
        data = json.loads(text)
        if set(data) != {"made_on", "rows"} or not data["rows"]:  # no rows: an empty table, never written over one
            raise ValueError("expected made_on and a list of rows")
        made_on = dt.date.fromisoformat(data["made_on"])
        for number, saved in enumerate(data["rows"], 1):
            where = f"row {number}: "
            row = Row(**saved)
            if not row.error and not (row.before and row.after):  # a run writes its results, or why there are none
                raise ValueError("no test results (before and after) and no error")
            to_markdown([row])  # read as the table reads it: a field of another kind fails here
            rows.append(row)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise SeriesError(f"{source} is not a saved matrix ({where}{exc}); run the matrix again") from None
    return rows, made_on


def missing_results(rows: list[Row]) -> list[tuple[str, str]]:
    """``(torch, why)`` per release without a full result (tests or compile statistics): the table has a hole."""
    missing = []
    for row in rows:
        if row.error or not (row.before and row.after):
            missing.append((row.torch, row.error or "no test results"))
        elif not row.compile or "error" in row.compile:
            missing.append((row.torch, f"compile statistics: {row.compile.get('error', 'none measured')}"))
    return missing


def to_markdown(rows: list[Row], today: dt.date | None = None) -> str:
    """The compatibility table: per torch release and test module, before and after the series."""
    day, torches = (today or dt.date.today()).isoformat(), ", ".join(row.torch for row in rows)
    lines = [
        f"Generated by `patchseries matrix` on {day} (Lightning 2.6.6, CPU, Python from the runner); torch {torches}."
    ]
    lines += ["", "| torch | test module | before the series | after the series |", "|---|---|---|---|"]
    for row in rows:
        if row.error:
            lines.append(f"| {row.torch} | (all) | not run | {row.error} |")
        for module in sorted(set(row.before) | set(row.after)):
            lines.append(f"| {row.torch} | `{module}` | {row.before.get(module, '-')} | {row.after.get(module, '-')} |")
    measured = {row.torch: ChangedLines.from_dict(row.changed_lines) for row in rows if row.changed_lines}
    if measured:
        merged, each = merge(list(measured.values())), "; ".join(f"{t} {c.line()}" for t, c in measured.items())
        lines += ["", "Changed lines (the Lightning lines the series adds or changes that coverage.py counts as "
                  f"executable) covered by the series' tests, merged over the releases: {merged.line()}; per release: "
                  f"{each}."]  # fmt: skip
        missed = [f"`{path.removeprefix('src/')}:{number}`" for path, number, _ in merged.missed_lines()]
        if missed:
            more = f" and {len(missed) - 20} more" if len(missed) > 20 else ""
            lines.append(f"Not covered on any release: {', '.join(missed[:20])}{more}.")
    lines += _COMPILE_HEAD.split("\n")
    for row in (row for row in rows if row.compile and not row.error):
        cells = [_compile_cell(row.compile.get(variant, {})) for variant in ("none", "calls", "toggled", "with")]
        lines.append(f"| {row.torch} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def _compile_cell(stats: dict[str, Any]) -> str:
    if "error" in stats:
        return f"error: {stats['error']}"
    keys = ("graphs", "graph_breaks", "recompiles", "model_matmuls_in_graphs")
    return " / ".join(str(stats.get(key, "?")) for key in keys) if stats else "-"


def check_table_page(page: Path) -> str:
    """The page's text, refused unless it has one start marker and, after it, one end marker (checked before a run)."""
    text = page.read_bytes().decode()
    if text.count(TABLE_START) != 1 or text.count(TABLE_END) != 1 or text.index(TABLE_END) < text.index(TABLE_START):
        raise SeriesError(f"{page} needs one {TABLE_START} line, then one {TABLE_END} line, around the table")
    return text


def update_table_page(page: Path, table: str) -> None:
    """Replace the table between the markers in one rename, keeping the file's line endings (CRLF stays CRLF)."""
    text = check_table_page(page)
    newline = "\r\n" if "\r\n" in text else "\n"
    head, rest = text.split(TABLE_START, 1)
    table = table.replace("\r\n", "\n").replace("\n", newline)
    write_file(page, f"{head}{TABLE_START}{newline}{table}{TABLE_END}{rest.split(TABLE_END, 1)[1]}")


def _probe(env: Environment, log: Log, torch: str) -> dict[str, Any]:
    log(f"torch {torch}: compile statistics")
    probe = (project_root() or PROJECT_ROOT) / "benchmarks" / "toggle_cost.py"
    command = [str(env.python), str(probe), "--json", "--backend", "aot_eager", "--steps", "6"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    try:
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):  # its error, such as a probe that is not there
        return {"error": (proc.stderr.strip().splitlines() or ["probe failed"])[-1][:160]}


def _tree_without_series(ws: Workspace, prepared: Prepared) -> Path:
    """The "before" side: a worktree of the base with the series' test files, the acceptance suite, the harness."""
    repo = prepared.base.path
    tree = base_worktree(ws, repo, "before-series")
    added = [path for patch in prepared.patches for path in patch.new_files if path.startswith("tests/")]
    for path in added:
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(git("show", f"HEAD:{path}", cwd=repo).stdout)
    add_excludes(tree, [f"/{path}" for path in added])  # the tool's copies, never a person's uncommitted files
    acceptance.install(tree, ws.acceptance)
    write_harness(tree, prepared.patches)
    return tree
