"""`forward`: regenerate the forward series (``patches/master/``) from the release series, onto an upstream commit.

Each patch of the release series is tried in order on a scratch clone at the forward series' pinned commit:

- a patch whose changes the target already has (the upstream commits it backports) is reported and not carried;
- a patch marked ``Upstream-Status: Inappropriate [why]`` (a release-only workaround) is reported and not carried;
- every other patch is re-applied with ``git am --3way``, without its CHANGELOG hunks, which never apply across
  releases; its CHANGELOG entries are then appended under the same heading (``### Fixed``, ...) of the target's
  unreleased section, and its DEP-3 trailers (``Upstream-Status:``, ``Bug:``, ...) are dropped: upstream's commits
  carry none, and the forward patches are pull requests;
- a patch that conflicts is reported with its files and left out; later patches are still tried, and nothing is
  written, so that the forward series never silently lacks a change of the release series.

The entries' headings are read from the release series itself: the clone has the release's tag, the release series is
applied there first, and each entry is looked up in the CHANGELOG as that patch left it.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.export import export_series
from patchseries.gitcmd import ENCODING_ERRORS, TOOL_IDENTITY, failure_cause, git, out
from patchseries.interrupts import stage
from patchseries.onto import already_upstream, upstream_patch_ids
from patchseries.paths import tool_command
from patchseries.pin import Pin
from patchseries.series import Patch, file_sections, hunks, keep_cr, section_path
from patchseries.trees import abort_am, failed_files, refuse_operation_in_progress

_CHANGELOG = re.compile(r"(^|/)CHANGELOG\.md$")
_INDEX = re.compile(r"^index [0-9a-f]+\.\.([0-9a-f]+)")
_UNRELEASED = re.compile(r"^## \[unreleased\]", re.IGNORECASE)
# DEP-3's fields (and the Upstream-Status the release series uses with them), which the forward series does not carry
DEP3_KEYS = ("Upstream-Status", "Forwarded", "Origin", "Bug", "Applied-Upstream", "Last-Update", "Description")
_DEP3_BUG = re.compile(r"^Bug-[A-Za-z]+$")  # Bug-Debian, Bug-Ubuntu, ...
_TRAILER = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*): ")
# Keep a Changelog's order of the headings of a release section
_HEADINGS = ("### Added", "### Changed", "### Deprecated", "### Removed", "### Fixed", "### Security")


@dataclass(frozen=True)
class Entry:
    """A CHANGELOG entry a patch adds: the file, its heading (``### Fixed``) and the entry's text."""

    changelog: str
    heading: str
    text: str


@dataclass
class Forwarded:
    """What happened to one patch of the release series."""

    patch: str
    status: str  # "already upstream", "release only", "forwarded" or "conflicts"
    detail: str = ""
    entries: list[Entry] = field(default_factory=list)


def forward_series(
    upstream: Path,
    release: Pin,
    release_patches: list[Patch],
    target: Pin,
    out_dir: Path,
    author: str | None = None,
    check: str = tool_command("check"),
) -> list[Forwarded]:
    """Write the forward series of ``release_patches`` onto ``target.commit`` of ``upstream`` into ``out_dir``.

    ``author`` is the ``From:`` of every patch (else the release patches' own authors); an ``@invalid`` one is refused.
    Files of ``out_dir`` other than its patches and ``series`` (the pin, draft issue texts) are kept. Relative paths
    (``upstream``, ``out_dir``, the patches') are taken from the current directory, not from the scratch clone.
    ``check``: the drift check a refusal names for a release patch that does not apply (the run's own options).
    """
    upstream, out_dir = upstream.resolve(), out_dir.resolve()
    refuse_operation_in_progress(upstream)  # its refs may be anywhere until the operation ends
    release_patches = [replace(patch, path=patch.path.absolute()) for patch in release_patches]
    for ref, what in ((f"refs/tags/{release.tag}", f"the release's tag {release.tag}"), (target.commit, "the target")):
        if git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=upstream, check=False).returncode != 0:
            raise SeriesError(f"{upstream} lacks {what} ({ref}); fetch it (git fetch origin --tags) and re-run")
    results: list[Forwarded] = []
    with tempfile.TemporaryDirectory(prefix="patchseries-forward-") as tmp:
        scratch = Path(tmp) / "tree"
        git("clone", "--quiet", "--shared", "--no-checkout", upstream, scratch)
        stage("forward-scratch")
        entries = _entries_by_patch(scratch, release.tag, release_patches, check)
        git("checkout", "--quiet", "-b", "forward", target.commit, cwd=scratch)
        git("branch", "--quiet", "forward-base", target.commit, cwd=scratch)
        paths = sorted({change.path for patch in release_patches for change in patch.changes})
        upstream_ids = upstream_patch_ids(scratch, release.tag, target.commit, paths)
        for patch in release_patches:
            results.append(_forward_one(scratch, patch, entries[patch.name], upstream_ids))
        if any(r.status == "conflicts" for r in results):
            return results  # nothing is written: a forward series with a hole would not be the release series
        if not any(r.status == "forwarded" for r in results):
            raise SeriesError(f"no patch of the series is left to forward onto {target.commit[:12]}")
        export_series(
            scratch, out_dir, branch="forward", base="forward-base", author=author, refuse_placeholder_authors=True,
            replace_unexported=True,
        )  # fmt: skip
    return results


def _forward_one(repo: Path, patch: Patch, entries: list[Entry], upstream_ids: dict[str, str]) -> Forwarded:
    status = dict(patch.trailers).get("Upstream-Status", "")
    if status.startswith("Inappropriate"):  # DEP-3: a release-only workaround, which upstream will not take
        return Forwarded(patch.name, "release only", status.removeprefix("Inappropriate").strip(" []"))
    present = already_upstream(repo, patch, upstream_ids)
    if present:
        return Forwarded(patch.name, "already upstream", present)
    changelogs = [f"--exclude={c.path}" for c in patch.changes if _CHANGELOG.search(c.path)]
    proc = git("am", "--3way", *keep_cr(patch.path), *changelogs, patch.path, cwd=repo, env=TOOL_IDENTITY, check=False)
    if proc.returncode != 0:
        files = failed_files(repo, proc)
        abort_am(repo)
        return Forwarded(patch.name, "conflicts", ", ".join(files) or failure_cause(proc))
    for entry in entries:
        if _add_entry(repo / entry.changelog, entry):
            git("add", entry.changelog, cwd=repo)
    if not out("diff", "--cached", "--name-only", "HEAD~1", cwd=repo):  # only entries, and the target has them
        git("reset", "--quiet", "--hard", "HEAD~1", cwd=repo)
        return Forwarded(patch.name, "already upstream", "its CHANGELOG entries are there")
    message = forward_message(out("log", "-1", "--format=%B", cwd=repo))
    git("commit", "--quiet", "--amend", "--no-verify", "-m", message, cwd=repo, env=TOOL_IDENTITY)
    return Forwarded(patch.name, "forwarded", entries=entries)


def forward_message(message: str) -> str:
    """The release patch's message without its DEP-3 trailers (see :data:`DEP3_KEYS`), otherwise unchanged.

    Other trailers (``Signed-off-by:``, ``Co-authored-by:``) stay; a trailer block of DEP-3 fields only goes away.
    """
    paragraphs = message.strip("\n").split("\n\n")
    last = paragraphs[-1].splitlines()
    keys = [match.group("key") if (match := _TRAILER.match(line)) else None for line in last]
    if len(paragraphs) < 2 or None in keys:
        return message.strip("\n") + "\n"  # no trailer block
    kept = [line for line, key in zip(last, keys, strict=True) if key is not None and not _is_dep3(key)]
    return "\n\n".join([*paragraphs[:-1], *(["\n".join(kept)] if kept else [])]) + "\n"


def _is_dep3(key: str) -> bool:
    return key in DEP3_KEYS or bool(_DEP3_BUG.match(key))


def _entries_by_patch(repo: Path, tag: str, patches: list[Patch], check: str) -> dict[str, list[Entry]]:
    """Apply the release series at ``tag`` and read each patch's CHANGELOG entries with their headings."""
    git("checkout", "--quiet", "--detach", f"refs/tags/{tag}", cwd=repo)
    found: dict[str, list[Entry]] = {}
    for patch in patches:
        proc = git("am", "--quiet", *keep_cr(patch.path), patch.path, cwd=repo, env=TOOL_IDENTITY, check=False)
        if proc.returncode != 0:
            abort_am(repo)
            raise SeriesError(f"{patch.name} does not apply to tag {tag}; run `{check}` first")
        found[patch.name] = _entries(repo, patch)
    return found


def _entries(repo: Path, patch: Patch) -> list[Entry]:
    entries = []
    for changelog, blob, added in _changelog_hunks(patch.path.read_text(errors=ENCODING_ERRORS)):
        after = out("cat-file", "-p", blob, cwd=repo).splitlines()
        for line_number, text in added:
            entries.append(Entry(changelog, _heading_above(after, line_number), text))
    return entries


def _changelog_hunks(text: str) -> list[tuple[str, str, list[tuple[int, str]]]]:
    """``(path, post-image blob, added entries)`` for each CHANGELOG a patch file changes.

    An entry is an added ``- `` line and the added, indented lines that continue it (sub-bullets, wrapped text), with
    the index of its first line in the post-image, so that its heading is found even if its text occurs twice.
    """
    result = []
    for section in file_sections(text):
        lines = section.splitlines()
        path = section_path(section)
        if not _CHANGELOG.search(path):
            continue
        blob = next((m.group(1) for line in lines[1:4] if (m := _INDEX.match(line))), "")
        entries: list[tuple[int, list[str]]] = []
        for hunk in hunks(section):
            current: list[str] | None = None
            for marker, number, line in hunk:
                if marker == "+" and line.startswith("- "):
                    current = [line]
                    entries.append((number - 1, current))  # index in the post-image
                elif current is not None and marker == "+" and line.startswith(" ") and line.strip():
                    current.append(line)
                else:
                    current = None
        result.append((path, blob, [(index, "\n".join(entry)) for index, entry in entries]))
    return result


def _heading_above(lines: list[str], index: int) -> str:
    return next((line for line in reversed(lines[:index]) if line.startswith("### ")), "### Changed")


def _add_entry(changelog: Path, entry: Entry) -> bool:
    """Add ``entry`` at the end of its heading's list in the unreleased section, as an upstream pull request does
    (replacing a ``-`` placeholder, adding the heading in Keep a Changelog's order if the section lacks it); False if
    the section already has the entry.
    """
    if not changelog.is_file():
        raise SeriesError(f"the target has no {changelog.name} at {entry.changelog} to add the series' entries to")
    text = changelog.read_bytes().decode()
    newline = "\r\n" if "\r\n" in text else "\n"  # keep the file's line endings: the diff is the entry alone
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _UNRELEASED.match(line)), None)
    if start is None:
        raise SeriesError(f"{entry.changelog} has no '## [unreleased]' section to add an entry to")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    end = next((i for i in range(start + 1, end) if lines[i].startswith("---")), end)
    block = entry.text.splitlines()
    if block[0] in lines[start:end]:
        return False
    heading = next((i for i in range(start + 1, end) if lines[i].strip() == entry.heading), None)
    if heading is None:
        later = _HEADINGS[_HEADINGS.index(entry.heading) + 1 :] if entry.heading in _HEADINGS else ()
        where = next((i for i in range(start + 1, end) if lines[i].strip() in later), None)
        if where is None:
            where = _after_last_text(lines, start, end) + 1
            lines[where:where] = ["", entry.heading, "", *block]
        else:
            lines[where:where] = [entry.heading, "", *block, ""]
    else:
        stop = next((i for i in range(heading + 1, end) if lines[i].startswith("### ")), end)
        lines = _place_under_heading(lines, heading, stop, block)
    changelog.write_bytes((newline.join(lines) + newline).encode())
    return True


def _place_under_heading(lines: list[str], heading: int, stop: int, block: list[str]) -> list[str]:
    """``lines`` with ``block`` at the end of the list under ``lines[heading]`` (which ends before ``lines[stop]``)."""
    texts = [i for i in range(heading + 1, stop) if lines[i].strip()]
    if [lines[i].strip() for i in texts] == ["-"]:
        return lines[: texts[0]] + block + lines[texts[0] + 1 :]
    last = texts[-1] if texts else heading
    return lines[: last + 1] + ["", *block] + lines[last + 1 :]


def _after_last_text(lines: list[str], start: int, end: int) -> int:
    return next((i for i in range(end - 1, start, -1) if lines[i].strip()), start)
