"""The torch-version matrix: the series' tests before and after the series, per torch release, as JSON and Markdown.

The series' tests are what the main job runs on the sdist: the acceptance suite (``acceptance/``) and the test modules
the patches add; the table has one row per release and module.

One failing version never stops the others; its row says what failed, and the exit status says the matrix is
incomplete. The compatibility table of docs/compatibility.md is generated from the Markdown, never typed by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchseries import acceptance, changed_lines
from patchseries.atomic import write_file
from patchseries.environment import Environment, ensure_environment
from patchseries.errors import SeriesError
from patchseries.gitcmd import add_excludes, git
from patchseries.harness import write_harness
from patchseries.paths import PROJECT_ROOT, Workspace, project_root
from patchseries.pipeline import BaseChoice, Prepared, prepare
from patchseries.progress import Log
from patchseries.testrun import changed_source_files, junit_cases, run_tests
from patchseries.trees import BASE_REF, base_worktree, recording
from patchseries.wheels import TORCH_NEWEST_PATCH

# the newest patch release of every minor release Lightning 2.6.6 supports (PyPI, checked when a release was added):
# 2.1.2, 2.2.2, 2.3.1, 2.4.1, 2.5.1, 2.6.0, 2.7.1, 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.12.1, 2.13.0, 2.14.1, 2.15.0
DEFAULT_VERSIONS = tuple(f"{major}.{minor}.{patch}" for (major, minor), patch in TORCH_NEWEST_PATCH.items())
PROBE = Path("benchmarks") / "toggle_cost.py"  # in the project
TABLE_START, TABLE_END = "<!-- matrix:start -->", "<!-- matrix:end -->"


@dataclass
class Row:
    torch: str
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    compile: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    changed_lines: dict[str, Any] = field(default_factory=dict)  # ChangedLines.to_dict() of the "after" run


def run_matrix(ws: Workspace, versions: list[str], log: Log, installer: str = "auto") -> list[Row]:
    prepared = _prepare_series(ws, log)
    with recording(prepared.base.path):  # what installing and testing make in the tree and beside it is the tool's
        return _run_rows(ws, prepared, versions, log, installer)


def _run_rows(ws: Workspace, prepared: Prepared, versions: list[str], log: Log, installer: str) -> list[Row]:
    before_tree = _tree_without_series(ws, prepared)
    tests = prepared.test_modules()
    sources = changed_source_files([c.path for p in prepared.patches for c in p.changes])
    added = changed_lines.added_lines(prepared.base.path, BASE_REF, "HEAD")
    rows = []
    for number, version in enumerate(versions, 1):
        log(f"matrix {number}/{len(versions)}: torch {version}")
        row = Row(torch=version)
        rows.append(row)
        try:
            env = ensure_environment(ws, prepared.base.path, version, log, installer=installer)
        except SeriesError as exc:
            row.error = str(exc)
            log(f"torch {version}: {exc}")
            continue
        reports = ws.reports / "matrix" / version
        log(f"torch {version}: the series' tests without the series")
        # without the series, test modules that import what the series adds fail to import: report them, go on
        before_args = ("-q", "--continue-on-collection-errors")
        before = run_tests(env, before_tree, tests, [], reports / "before", before_args, before_tree / "src")
        row.before = results_by_module(before.junit)
        log(f"torch {version}: the series' tests with the series")
        after = run_tests(env, prepared.base.path, tests, sources, reports / "after", ("-q",))
        row.after = results_by_module(after.junit)
        if after.coverage_xml is not None:
            row.changed_lines = changed_lines.measure(added, changed_lines.line_hits(after.coverage_xml)).to_dict()
        log(f"torch {version}: compile statistics")
        row.compile = _probe(env)
    merged = merged_changed_lines(rows)
    if merged is not None:
        title = f"Lines the series adds or changes under src/, covered on any of torch {', '.join(versions)}"
        merged.write(ws.reports / "matrix", title)
    return rows


def merged_changed_lines(rows: list[Row]) -> changed_lines.ChangedLines | None:
    """The coverage of the changed lines merged over the rows that measured it (None if none did)."""
    measured = [changed_lines.ChangedLines.from_dict(row.changed_lines) for row in rows if row.changed_lines]
    return changed_lines.merge(measured) if measured else None


def refresh_compile_stats(ws: Workspace, rows: list[Row], log: Log, installer: str = "auto") -> None:
    """Measure the compile statistics again for saved rows (after a change to the probe), keeping test results."""
    prepared = _prepare_series(ws, log)
    with recording(prepared.base.path):
        for row in rows:
            if row.error:
                continue
            log(f"torch {row.torch}: compile statistics")
            env = ensure_environment(ws, prepared.base.path, row.torch, log, installer=installer)
            row.compile = _probe(env)


def _prepare_series(ws: Workspace, log: Log) -> Prepared:
    """The applied series: the tool's tree, exactly as built from patches/ (any other tree is refused)."""
    return prepare(ws, BaseChoice(), log)


def results_by_module(junit: Path) -> dict[str, str]:
    """``{"test_x": "9 passed, 1 xfailed"}`` per test module, from a JUnit report."""
    if not junit.exists():
        return {"(no report)": "error: pytest produced no report"}
    tallies: dict[str, Counter[str]] = {}
    for case in junit_cases(junit):
        # a module that fails to import is reported with an empty class name and the module path as its name
        module = (case.classname or case.name or "?").rsplit(".", 1)[-1]
        tallies.setdefault(module, Counter())[case.outcome] += 1
    order = ("failed", "passed", "xfailed", "skipped")
    return {m: ", ".join(f"{c[o]} {o}" for o in order if c[o]) for m, c in sorted(tallies.items())}


def to_json(rows: list[Row], today: dt.date | None = None) -> str:
    made_on = (today or dt.date.today()).isoformat()
    return json.dumps({"made_on": made_on, "rows": [row.__dict__ for row in rows]}, indent=2)


def from_json(text: str, source: str = "matrix.json") -> tuple[list[Row], dt.date]:
    """Rows and date of a saved ``matrix.json``, to render the table again without running anything.

    Anything :func:`to_json` would not have written is refused with one line that names ``source`` and the problem.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SeriesError(
            f"{source} is not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}); run the matrix again, or "
            "restore the file"
        ) from None
    if not isinstance(data, dict) or set(data) != {"made_on", "rows"}:
        found = ", ".join(sorted(data)) if isinstance(data, dict) else type(data).__name__
        raise SeriesError(f"{source} is not a saved matrix: expected the keys made_on and rows, found {found}")
    try:
        made_on = dt.date.fromisoformat(data["made_on"])
    except (TypeError, ValueError):
        raise SeriesError(f"{source}: made_on is not a date such as 2026-12-01: {data['made_on']!r}") from None
    if not isinstance(data["rows"], list):
        raise SeriesError(f"{source}: rows is not a list of rows")
    if not data["rows"]:  # rendered, it would be an empty table, and written over a page's complete one
        raise SeriesError(f"{source} has no rows: no release's results to render; run the matrix again")
    return [_row(row, f"{source}: row {number}") for number, row in enumerate(data["rows"], 1)], made_on


def _row(data: Any, where: str) -> Row:
    """One row of a saved matrix, each field of the type :class:`Row` holds."""
    if not isinstance(data, dict):
        raise SeriesError(f"{where} is not an object")
    unknown = sorted(set(data) - set(_ROW_FIELDS))
    if unknown:
        raise SeriesError(f"{where} has the unknown key {unknown[0]!r}")
    if "torch" not in data:
        raise SeriesError(f"{where} has no torch")
    for key, value in data.items():
        kind, valid = _ROW_FIELDS[key]
        if not valid(value):
            raise SeriesError(f"{where}: {key} is not {kind}")
    row = Row(**data)
    if row.changed_lines:
        try:
            changed_lines.ChangedLines.from_dict(row.changed_lines).line()
        except (AttributeError, KeyError, TypeError, ValueError):
            raise SeriesError(f"{where}: changed_lines is not a changed-lines record") from None
    if not row.error and not (row.before and row.after):  # a run writes its results, or the error that stopped them
        raise SeriesError(f"{where} has no test results (before and after) and no error; run the matrix again")
    return row


def _strings(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _compile_stats(value: Any) -> bool:
    """Statistics per variant, beside the probe's strings: the torch, Lightning and backend it ran, or its error."""
    return isinstance(value, dict) and all(isinstance(stats, (dict, str)) for stats in value.values())


# what each field of a saved row holds: (its kind in words, its check)
_ROW_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "torch": ("a string", lambda value: isinstance(value, str)),
    "before": ("an object of strings", _strings),
    "after": ("an object of strings", _strings),
    "compile": ("an object of objects", _compile_stats),
    "error": ("a string or null", lambda value: value is None or isinstance(value, str)),
    "changed_lines": ("an object", lambda value: isinstance(value, dict)),
}


def missing_results(rows: list[Row]) -> list[tuple[str, str]]:
    """``(torch, why)`` for each release without a full result: its tests did not run, or its compile statistics
    could not be measured. A table with any of them has a hole, and is not written over a complete one."""
    missing = []
    for row in rows:
        if row.error:
            missing.append((row.torch, row.error))
        elif not (row.before and row.after):
            missing.append((row.torch, "no test results"))
        elif not row.compile or "error" in row.compile:
            missing.append((row.torch, f"compile statistics: {row.compile.get('error', 'none measured')}"))
    return missing


def to_markdown(rows: list[Row], today: dt.date | None = None) -> str:
    """The compatibility table: per torch release and test module, before and after the series."""
    today = today or dt.date.today()
    lines = [
        f"Generated by `patchseries matrix` on {today.isoformat()} (Lightning 2.6.6, CPU, Python from the runner); "
        f"torch {', '.join(r.torch for r in rows)}.",
        "",
        "| torch | test module | before the series | after the series |",
        "|---|---|---|---|",
    ]
    for row in rows:
        if row.error:
            lines.append(f"| {row.torch} | (all) | not run | {row.error} |")
            continue
        for module in sorted(set(row.before) | set(row.after)):
            lines.append(f"| {row.torch} | `{module}` | {row.before.get(module, '-')} | {row.after.get(module, '-')} |")
    lines += _changed_lines_paragraph(rows)
    lines += [
        "",
        "Compile statistics with the series (`benchmarks/toggle_cost.py --backend aot_eager`, a two-optimizer GAN):",
        "graphs / graph breaks / recompiles after warm-up / model matmuls captured in graphs.",
        "",
        "| torch | no toggling | toggle + untoggle | `toggled_optimizer` | `with toggle_optimizer` |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if row.error or not row.compile:
            continue
        cells = [_compile_cell(row.compile.get(v, {})) for v in ("none", "calls", "toggled", "with")]
        lines.append(f"| {row.torch} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def check_table_page(page: Path) -> str:
    """The page's text, refused unless it has each marker once, the start before the end (checked before a run)."""
    text = page.read_bytes().decode()
    if TABLE_START not in text or TABLE_END not in text:
        raise SeriesError(f"{page} has no {TABLE_START} ... {TABLE_END} markers for the table")
    for marker in (TABLE_START, TABLE_END):
        if text.count(marker) > 1:
            raise SeriesError(f"{page} has {marker} {text.count(marker)} times; keep one pair of markers")
    if text.index(TABLE_END) < text.index(TABLE_START):
        raise SeriesError(f"{page} has {TABLE_END} before {TABLE_START}; put the start marker first")
    return text


def update_table_page(page: Path, table: str) -> None:
    """Replace the table between the markers in one step, keeping the file's line endings (CRLF stays CRLF)."""
    text = check_table_page(page)
    newline = "\r\n" if "\r\n" in text else "\n"
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    table = table.replace("\r\n", "\n").replace("\n", newline)
    write_file(page, f"{head}{TABLE_START}{newline}{table}{TABLE_END}{tail}")


def _changed_lines_paragraph(rows: list[Row]) -> list[str]:
    merged = merged_changed_lines(rows)
    if merged is None:
        return []
    per_release = [
        f"{row.torch} {changed_lines.ChangedLines.from_dict(row.changed_lines).line()}"
        for row in rows
        if row.changed_lines
    ]
    lines = [
        "",
        f"Changed lines (the Lightning lines the series adds or changes that coverage.py counts as executable) covered "
        f"by the series' tests, merged over the releases: {merged.line()}; per release: {'; '.join(per_release)}.",
    ]
    missed = merged.missed_lines()
    if missed:
        shown = ", ".join(f"`{path.removeprefix('src/')}:{number}`" for path, number, _ in missed[:20])
        more = f" and {len(missed) - 20} more" if len(missed) > 20 else ""
        lines.append(f"Not covered on any release: {shown}{more}.")
    return lines


def _compile_cell(stats: dict[str, Any]) -> str:
    if "error" in stats:
        return f"error: {stats['error']}"
    if not stats:
        return "-"
    keys = ("graphs", "graph_breaks", "recompiles", "model_matmuls_in_graphs")
    return " / ".join(str(stats.get(k, "?")) for k in keys)


def _probe(env: Environment) -> dict[str, Any]:
    probe = (project_root() or PROJECT_ROOT) / PROBE
    if not probe.is_file():
        return {"error": f"{PROBE} not found; run from a checkout of the project"}
    command = [str(env.python), str(probe), "--json", "--backend", "aot_eager", "--steps", "6"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    try:
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": (proc.stderr.strip().splitlines() or ["probe failed"])[-1][:160]}
    return result


def _tree_without_series(ws: Workspace, prepared: Prepared) -> Path:
    """A worktree at the base commit holding only the series' test files, the acceptance suite (and the harness):
    the "before" side."""
    repo = prepared.base.path
    tree = base_worktree(ws, repo, "before-series")
    added = [path for patch in prepared.patches for path in patch.new_files if path.startswith("tests/")]
    for path in added:
        target = tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(git("show", f"HEAD:{path}", cwd=repo).stdout)
    add_excludes(tree, [f"/{path}" for path in added])  # the tool's copies: never a person's uncommitted files
    acceptance.install(tree, ws.acceptance)
    write_harness(tree, prepared.patches)
    return tree
