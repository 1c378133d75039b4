"""CHANGELOG.md is a list: entries of at most three lines, under [Unreleased] and released versions with dates."""

from __future__ import annotations

import datetime as dt
import re

from patchseries.paths import PROJECT_ROOT

CHANGELOG = PROJECT_ROOT / "CHANGELOG.md"
MAX_LINES = 3
VERSION = re.compile(r"^## \[(?P<version>\d+\.\d+\.\d+)\] - (?P<date>\d{4}-\d{2}-\d{2})$")
SECTIONS = ("### Added", "### Changed", "### Deprecated", "### Removed", "### Fixed", "### Security")


def _lines() -> list[str]:
    text = re.sub(r"<!--.*?-->\n?", "", CHANGELOG.read_text(), flags=re.DOTALL)
    return text.splitlines()


def entries() -> list[list[str]]:
    """Each list entry with its continuation lines (indented by two spaces)."""
    found: list[list[str]] = []
    current: list[str] | None = None
    for line in _lines():
        if line.startswith("- "):
            current = [line]
            found.append(current)
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line)
        else:
            current = None
    return found


def test_every_entry_is_at_most_three_lines():
    long = [f"{len(entry)} lines: {entry[0][:80]}" for entry in entries() if len(entry) > MAX_LINES]
    assert long == []


def test_entries_are_under_unreleased_or_a_dated_version_newest_first():
    headings = [line for line in _lines() if line.startswith("## ")]
    assert headings[0] == "## [Unreleased]"
    versions = [VERSION.match(heading) for heading in headings[1:]]
    assert all(versions), [h for h, v in zip(headings[1:], versions, strict=True) if not v]
    numbers = [tuple(int(part) for part in v["version"].split(".")) for v in versions if v]
    dates = [dt.date.fromisoformat(v["date"]) for v in versions if v]
    assert numbers == sorted(numbers, reverse=True)
    assert len(set(numbers)) == len(numbers)
    assert dates == sorted(dates, reverse=True)


def test_entries_sit_in_keep_a_changelog_sections_once_per_version():
    section = None
    seen: set[str] = set()
    for line in _lines():
        if line.startswith("## "):
            section, seen = None, set()
        elif line.startswith("### "):
            assert line in SECTIONS, line
            assert line not in seen, f"{line} twice in one version"
            section = line
            seen.add(line)
        elif line.startswith("- "):
            assert section, f"an entry outside a section: {line[:80]}"


def test_entries_are_found():
    assert len(entries()) > 50
    assert all(entry[0].startswith("- ") for entry in entries())
