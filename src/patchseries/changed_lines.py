"""Coverage of the lines the series adds or changes (what Codecov calls patch coverage, ``diff-cover`` computes).

The lines come from ``git diff -U0 base series`` (added lines of Python files under ``src/``; a changed line is an
added line). Which of them count is coverage.py's decision: only lines its XML report lists (its executable lines) are
counted, and one is covered when it has a hit. Reports of several runs (the torch matrix) merge by union: a line is
covered when any run covered it.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchseries.gitcmd import git
from patchseries.series import file_sections, hunks, section_path

REPORT_NAME = "changed-lines.txt"
JSON_NAME = "changed-lines.json"


@dataclass
class FileLines:
    """The changed lines of one file that coverage counts: those covered, and the others with their source text."""

    covered: set[int] = field(default_factory=set)
    missed: dict[int, str] = field(default_factory=dict)


@dataclass
class ChangedLines:
    """Changed executable lines per file (repository paths), and changed files the coverage report does not know."""

    files: dict[str, FileLines] = field(default_factory=dict)
    unmeasured: list[str] = field(default_factory=list)

    @property
    def covered(self) -> int:
        return sum(len(f.covered) for f in self.files.values())

    @property
    def total(self) -> int:
        return sum(len(f.covered) + len(f.missed) for f in self.files.values())

    @property
    def percent(self) -> float | None:
        return round(100 * self.covered / self.total, 1) if self.total else None

    def line(self) -> str:
        """``N/M covered (P%)``, and the files no coverage data was found for, if any."""
        percent = "n/a" if self.percent is None else f"{self.percent}%"
        text = f"{self.covered}/{self.total} covered ({percent})"
        if self.unmeasured:
            text += f", {len(self.unmeasured)} changed files not in the coverage report"
        return text

    def missed_lines(self) -> list[tuple[str, int, str]]:
        """``(path, line, source)`` of every uncovered changed line, by path and line."""
        return [(path, n, f.missed[n]) for path, f in sorted(self.files.items()) for n in sorted(f.missed)]

    def report(self, title: str) -> str:
        """The report file: the figure, then every uncovered line as ``path:line: source``."""
        lines = [f"{title}", f"changed lines: {self.line()}", ""]
        missed = self.missed_lines()
        lines.append("uncovered changed lines:" if missed else "uncovered changed lines: none")
        lines += [f"{path}:{number}: {source.strip()}" for path, number, source in missed]
        if self.unmeasured:
            lines += ["", "changed files the coverage report does not include (never imported?):"]
            lines += [f"{path}" for path in self.unmeasured]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        files = {
            path: {"covered": sorted(f.covered), "missed": {str(n): f.missed[n] for n in sorted(f.missed)}}
            for path, f in sorted(self.files.items())
        }
        return {"files": files, "unmeasured": list(self.unmeasured)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChangedLines:
        files = {
            path: FileLines(set(entry["covered"]), {int(n): text for n, text in entry["missed"].items()})
            for path, entry in data.get("files", {}).items()
        }
        return cls(files, list(data.get("unmeasured", [])))

    def write(self, directory: Path, title: str) -> Path:
        """Write the text report and its JSON form (for merging later) into ``directory``; return the text report."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / JSON_NAME).write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        report = directory / REPORT_NAME
        report.write_text(self.report(title))
        return report


def added_lines(repo: Path, base: str, head: str, prefix: str = "src/") -> dict[str, dict[int, str]]:
    """The lines ``head`` adds or changes against ``base`` in Python files under ``prefix``: path -> line -> text."""
    diff = git("diff", "-U0", "--no-color", "--no-ext-diff", base, head, "--", f"{prefix}*.py", cwd=repo).stdout
    return parse_added_lines(diff, prefix)


def parse_added_lines(diff: str, prefix: str = "src/") -> dict[str, dict[int, str]]:
    """Parse a ``git diff -U0``: the ``+`` lines of each Python file under ``prefix``, by their number."""
    added: dict[str, dict[int, str]] = {}
    for section in file_sections(diff):
        path = section_path(section)  # from the header: a "+++" line ends with a tab when the path has a space
        if path.startswith(prefix) and path.endswith(".py"):
            lines = {number: text for hunk in hunks(section) for marker, number, text in hunk if marker == "+"}
            if lines:
                added.setdefault(path, {}).update(lines)
    return added


def line_hits(coverage_xml: Path) -> dict[str, dict[int, int]]:
    """Hits per executable line, per file name as coverage.py's XML report writes it (relative to a source dir)."""
    hits: dict[str, dict[int, int]] = {}
    for cls in ET.parse(coverage_xml).getroot().iter("class"):
        lines = hits.setdefault(cls.get("filename") or "", {})
        for entry in cls.iter("line"):
            number = int(entry.get("number") or 0)
            lines[number] = max(lines.get(number, 0), int(entry.get("hits") or 0))
    return hits


def measure(added: dict[str, dict[int, str]], hits: dict[str, dict[int, int]]) -> ChangedLines:
    """Intersect the added lines with a report's hits; only lines the report lists as executable count."""
    result = ChangedLines()
    for path, lines in sorted(added.items()):
        report_name = _report_name(path, hits)
        if report_name is None:
            result.unmeasured.append(path)
            continue
        executable = hits[report_name]
        counted = FileLines()
        for number, text in lines.items():
            if number not in executable:
                continue
            if executable[number] > 0:
                counted.covered.add(number)
            else:
                counted.missed[number] = text
        result.files[path] = counted
    return result


def measure_tree(repo: Path, base: str, head: str, coverage_xml: Path) -> ChangedLines:
    """:func:`measure` of ``base..head`` in ``repo`` against one coverage report."""
    return measure(added_lines(repo, base, head), line_hits(coverage_xml))


def merge(results: list[ChangedLines]) -> ChangedLines:
    """Union over several runs: a line counts if any run counted it, and is covered if any run covered it."""
    merged = ChangedLines()
    for result in results:
        for path, lines in result.files.items():
            into = merged.files.setdefault(path, FileLines())
            into.covered |= lines.covered
            for number, text in lines.missed.items():
                into.missed.setdefault(number, text)
    for lines in merged.files.values():
        for number in lines.covered:
            lines.missed.pop(number, None)
    unmeasured = {path for result in results for path in result.unmeasured}
    merged.unmeasured = sorted(unmeasured - set(merged.files))
    return merged


def _report_name(path: str, hits: dict[str, dict[int, int]]) -> str | None:
    """The report's name for a repository path: equal, or a suffix of it at a directory boundary (the longest)."""
    matches = [
        name for name in hits if name and (path == name or path.endswith("/" + name) or name.endswith("/" + path))
    ]
    return max(matches, key=len) if matches else None
