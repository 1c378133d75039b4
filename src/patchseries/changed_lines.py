"""Coverage of the lines the series adds or changes (Codecov's patch coverage, diff-cover's figure), merged by union."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchseries.gitcmd import git
from patchseries.series import file_sections, hunks, section_path

JSON_NAME = "changed-lines.json"


@dataclass
class FileLines:
    covered: set[int] = field(default_factory=set)
    missed: dict[int, str] = field(default_factory=dict)  # line -> source text


@dataclass
class ChangedLines:  # changed executable lines per file, and changed files the coverage report does not know
    files: dict[str, FileLines] = field(default_factory=dict)
    unmeasured: list[str] = field(default_factory=list)

    def line(self) -> str:
        covered = sum(len(f.covered) for f in self.files.values())
        total = covered + sum(len(f.missed) for f in self.files.values())
        more = f", {len(self.unmeasured)} changed files not in the coverage report" if self.unmeasured else ""
        return f"{covered}/{total} covered ({f'{round(100 * covered / total, 1)}%' if total else 'n/a'}){more}"

    def missed_lines(self) -> list[tuple[str, int, str]]:
        return [(path, n, f.missed[n]) for path, f in sorted(self.files.items()) for n in sorted(f.missed)]

    def report(self, title: str) -> str:
        missed = self.missed_lines()
        lines = [title, f"changed lines: {self.line()}", "", "uncovered changed lines:" + ("" if missed else " none")]
        lines += [f"{path}:{number}: {source.strip()}" for path, number, source in missed]
        if self.unmeasured:
            lines += ["", "changed files the coverage report does not include (never imported?):", *self.unmeasured]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:  # JSON's: a line number as a key becomes a string
        items = self.files.items()
        files = {p: {"covered": sorted(f.covered), "missed": dict(sorted(f.missed.items()))} for p, f in items}
        return {"files": dict(sorted(files.items())), "unmeasured": list(self.unmeasured)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChangedLines:
        files = data.get("files", {}).items()
        return cls({p: FileLines(set(f["covered"]), {int(n): t for n, t in f["missed"].items()}) for p, f in files},
                   list(data.get("unmeasured", [])))  # fmt: skip

    def write(self, directory: Path, title: str) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / JSON_NAME).write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        (report := directory / "changed-lines.txt").write_text(self.report(title))
        return report


def added_lines(repo: Path, base: str, head: str) -> dict[str, dict[int, str]]:
    """The lines ``head`` adds or changes against ``base`` in Python files under ``src/``: path -> line -> text."""
    diff = git("diff", "-U0", "--no-color", "--no-ext-diff", base, head, "--", "src/*.py", cwd=repo).stdout
    return parse_added_lines(diff)


def parse_added_lines(diff: str) -> dict[str, dict[int, str]]:
    added: dict[str, dict[int, str]] = {}
    for section in file_sections(diff):
        path = section_path(section)  # the header's: a "+++" line ends with a tab when the path has a space
        lines = {number: text for hunk in hunks(section) for marker, number, text in hunk if marker == "+"}
        if path.startswith("src/") and path.endswith(".py") and lines:
            added.setdefault(path, {}).update(lines)
    return added


def measure(added: dict[str, dict[int, str]], coverage_xml: Path) -> ChangedLines:
    """The added lines that coverage.py's XML report counts as executable; a path is the longest name that ends it."""
    hits: dict[str, dict[int, int]] = {}
    for cls in ET.parse(coverage_xml).getroot().iter("class"):
        counts = hits.setdefault(cls.get("filename") or "", {})
        for entry in cls.iter("line"):
            number = int(entry.get("number") or 0)
            counts[number] = max(counts.get(number, 0), int(entry.get("hits") or 0))
    result = ChangedLines()
    for path, lines in sorted(added.items()):
        if not (names := [n for n in hits if n and (path == n or path.endswith("/" + n) or n.endswith("/" + path))]):
            result.unmeasured.append(path)
            continue
        executable = hits[max(names, key=len)]
        result.files[path] = FileLines({n for n in lines if executable.get(n, 0) > 0},
                                       {n: text for n, text in lines.items() if executable.get(n) == 0})  # fmt: skip
    return result


def merge(results: list[ChangedLines]) -> ChangedLines:
    """Union over several runs: a line counts if any run counted it, and is covered if any run covered it."""
    merged = ChangedLines()
    for result in results:
        for path, lines in result.files.items():
            into = merged.files.setdefault(path, FileLines())
            into.covered |= lines.covered
            into.missed = {**lines.missed, **into.missed}
    for lines in merged.files.values():
        lines.missed = {n: text for n, text in lines.missed.items() if n not in lines.covered}
    merged.unmeasured = sorted({p for result in results for p in result.unmeasured} - set(merged.files))
    return merged
