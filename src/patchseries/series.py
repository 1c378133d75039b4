"""The ordered patch list (``patches/series``, quilt style) and what each patch touches."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from patchseries.atomic import finish_rewrite
from patchseries.errors import SeriesError
from patchseries.gitcmd import git, has_path
from patchseries.lock import series_lock
from patchseries.paths import tool_command

_FILE_SECTION_START = re.compile(r"(?m)^(?=diff --git )")
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_QUOTED_PAIR = re.compile(r'^"((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)"$')
_DIFFERENT_PATHS = re.compile(r"^(a/\S+) (b/\S+)$")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_SUBJECT = re.compile(r"^Subject: (?:\[[^\]]*\] )?(.*)$")
_TRAILER = re.compile(r"^([A-Z][A-Za-z-]+): (.+)$")
_MESSAGE_START = re.compile(r"(?m)^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001$")  # git format-patch's first line
FROM_HEADER = re.compile(r"^From: (?P<identity>.*(?:\n[ \t].*)*)", re.MULTILINE)  # with its continuation lines


@dataclass(frozen=True)
class FileChange:
    path: str
    kind: str  # "new", "deleted" or "modified"


@dataclass(frozen=True)
class Patch:
    path: Path
    subject: str
    changes: tuple[FileChange, ...]
    trailers: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def new_files(self) -> list[str]:
        return [c.path for c in self.changes if c.kind == "new"]

    @property
    def touched_existing(self) -> list[str]:
        return [c.path for c in self.changes if c.kind != "new"]


def read_series(series_file: Path) -> list[Patch]:
    """Read the series file and parse every patch it names, refusing a missing or malformed one.

    Each line names one patch file of the series directory, once; an empty series is refused too, before any work.
    An export that an interrupt left half-done is completed first, so the series read is the old one or the new one.
    """
    finish_rewrite(series_file.parent)
    if not series_file.is_file():
        raise SeriesError(f"series file {series_file} does not exist")
    directory = series_file.parent.resolve()
    seen: dict[Path, tuple[str, int]] = {}  # by the file itself: ./0001-x.patch and 0001-x.patch are one patch
    patches = []
    for number, name in _listed(series_file):
        path = series_file.parent / name
        resolved = path.resolve()
        if directory not in resolved.parents:
            raise SeriesError(
                f"{series_file} line {number} names {name}, outside {directory}; list patch files of that folder only"
            )
        if resolved in seen:
            first, line_number = seen[resolved]
            spelled = name if first == name else f"{first} (as {name})"
            raise SeriesError(
                f"{series_file} lists {spelled} twice (lines {line_number} and {number}); list each patch once"
            )
        seen[resolved] = (name, number)
        if not path.is_file():
            what = "is not a file" if path.exists() else "does not exist"
            raise SeriesError(
                f"series names {name}, but {path} {what}; restore that file, or remove line {number} from {series_file}"
            )
        patches.append(parse_patch(path))
    if not patches:
        raise SeriesError(
            f"{series_file} lists no patches; add the patch file names, one a line (or export a branch with "
            f"`{tool_command('export', '--patches', series_file.parent.absolute())}`)"
        )
    return patches


def snapshot_series(folder: Path, into: Path) -> list[Patch]:
    """The series of ``folder`` read once and held: its patches and ``base.toml`` copied into ``into`` under the
    folder's lock (which ``export`` and ``forward`` hold while they write it), so that a command that works from them
    for minutes sees one series throughout, whatever is written to ``folder`` meanwhile."""
    with series_lock(folder):
        patches = read_series(folder / "series")
        into.mkdir(parents=True)
        shutil.copyfile(folder / "base.toml", into / "base.toml")
        return [replace(patch, path=Path(shutil.copyfile(patch.path, into / patch.name))) for patch in patches]


def listed_names(series_file: Path) -> list[str]:
    """The file names of the patches ``series_file`` lists (none if it does not exist), each spelling resolved to the
    file of the series folder it names (``./0001-x.patch`` is ``0001-x.patch``), without reading the patches: what an
    export replaces. A name outside the folder is none of its files."""
    if not series_file.is_file():
        return []
    names = (os.path.normpath(name) for _, name in _listed(series_file))
    return [name for name in names if "/" not in name and name not in (".", "..")]


def _listed(series_file: Path) -> list[tuple[int, str]]:
    """The line number and the name of each patch the series file lists, as written: the one reader of that file.

    A line that is not UTF-8 is refused by name (its patch names would be misread); ``#`` starts a comment.
    """
    try:
        # a byte order mark some editors write would otherwise be part of the first patch's name
        lines = series_file.read_bytes().decode().removeprefix("\ufeff").splitlines()
    except UnicodeDecodeError as exc:
        raise SeriesError(
            f"{series_file} is not UTF-8 text ({exc.reason} at byte {exc.start}); list the patch file names in UTF-8"
        ) from None
    names = [(number, line.split("#", 1)[0].strip()) for number, line in enumerate(lines, 1)]
    for number, name in names:
        if any(ord(char) < 32 for char in name):  # a NUL would end in a traceback, and no patch is named so
            raise SeriesError(f"{series_file} line {number} is not a file name: {name!r}; list the patch file names")
    return [(number, name) for number, name in names if name]


def parse_patch(path: Path) -> Patch:
    """Parse a ``git format-patch`` file; raise if it is not one or if git cannot read its diff."""
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    subject = _subject(lines)
    changes: list[FileChange] = []
    for index, line in enumerate(lines):
        header = diff_paths(line)
        if header is None:
            continue
        following = lines[index + 1 : index + 3]
        kind = "modified"
        if any(f.startswith("new file mode") for f in following):
            kind = "new"
        elif any(f.startswith("deleted file mode") for f in following):
            kind = "deleted"
        changes.append(FileChange(path=header[1] if kind != "deleted" else header[0], kind=kind))
    if subject is None or not changes:
        raise SeriesError(f"{path.name} is not a git format-patch file (no Subject: header or no diff)")
    messages = len(_MESSAGE_START.findall(text))
    if messages > 1:  # `git am` would apply each as a commit of its own, where the series counts one patch
        raise SeriesError(f"{path.name} holds {messages} patches; git format-patch writes one a file: split it")
    check = git("apply", "--numstat", path, check=False)
    if check.returncode != 0:
        reason = (check.stderr.strip().splitlines() or ["unreadable diff"])[-1]
        raise SeriesError(f"{path.name} is malformed: {reason}")
    return Patch(path=path, subject=subject, changes=tuple(changes), trailers=tuple(_trailers(lines)))


def author_header(text: str) -> re.Match[str] | None:
    """The ``From:`` header of a patch file's text (its mail headers only: a ``From:`` line of its message is not)."""
    return FROM_HEADER.search(text.split("\n\n", 1)[0])


def without_author(patch: bytes) -> bytes:
    """A patch file's bytes less its ``From:`` header, which an export's ``--author`` sets: the rest is the commit's."""
    text = patch.decode(errors="surrogateescape")
    found = author_header(text)
    return patch if found is None else (text[: found.start()] + text[found.end() :]).encode(errors="surrogateescape")


def has_crlf(patch: Path) -> bool:
    """Whether a patch file was converted to CRLF line endings: its ``From`` line, which git writes, ends in CR."""
    with patch.open("rb") as handle:
        return handle.readline().endswith(b"\r\n")


def crlf_problem(path: Path, reexport: str | None = None, name: str | None = None) -> str:
    """What ``check`` (a drift) and ``wheels`` (a refusal) say of the file at ``path`` (a patch, or ``series``)
    converted to CRLF line endings (:func:`has_crlf`): one wording, one remedy. The conversion back comes first, as it
    works as written whether or not an edit tree exists to export from; ``reexport``:
    the export command, with the run's own options (``Workspace.command("export")``); by default the tool's command
    without them."""
    convert = f"perl -pi -e 's/\\r$//' {shlex.quote(str(path))}"
    return (
        f"{name or path.name} has CRLF line endings, which export does not write; convert it back with `{convert}`, "
        f"or re-export it from your edit tree with `{reexport or tool_command('export')}`"
    )


def keep_cr(patch: Path) -> list[str]:
    """``git am``'s option for ``patch``: ``--keep-cr``, so that a line of a file that ends in CR keeps it (without it
    `git am` strips the CR, and the file applied is not the one exported); not for a patch file
    converted to CRLF line endings, whose CRs are no file's."""
    return [] if has_crlf(patch) else ["--keep-cr"]


def dropped_hunks(
    repo: Path, base: str, committed: list[Patch], lacks: tuple[str, ...], exported: list[Path] | None = None
) -> list[str]:
    """``"<patch>'s hunks for <paths>"`` for each ``committed`` patch that changes files ``base`` of ``repo`` lacks:
    what an export of ``repo`` would drop (``exported``: the patches it made, which name a file one of its commits
    adds there).

    A tree whose base lacks those files (the sdist tree) never had those hunks, so nothing it exports can carry them:
    the whole committed series is compared, not patch by patch, so that a reworded subject or a patch that changes
    only such files (which applying skipped) cannot hide a loss. A file that a commit of the tree adds at such a path
    (a placeholder) is not upstream's either, so it hides nothing; only a file the series itself adds before the patch
    that changes it is not lost.
    """
    if not lacks:
        return []
    exported_new = {path for patch in exported or [] for path in parse_patch(patch).new_files}
    added_by_series: set[str] = set()  # a file an earlier patch of the series adds is the series', not upstream's
    dropped = []
    for old in committed:
        lost = [
            p
            for p in old.touched_existing
            if p.startswith(lacks) and p not in added_by_series and not has_path(repo, p, base)
        ]
        if lost:
            shown = [f"{p} (replaced by a new file there)" if p in exported_new else p for p in lost]
            dropped.append(f"{old.name}'s hunks for {', '.join(shown)}")
        added_by_series.update(old.new_files)
    return dropped


def diff_paths(line: str) -> tuple[str, str] | None:
    """The old and new path of a ``diff --git`` header line, or ``None`` if ``line`` is not one.

    Git writes a path with a space as it is (``diff --git a/my file.py b/my file.py``), so the two halves are told
    apart by being equal, as they are for every change but a rename (which the series' export never writes). A path
    with a quote, a backslash, a control or a non-ASCII character is C-quoted (``"a/caf\\303\\251.py"``).
    """
    if not line.startswith("diff --git "):
        return None
    rest = line[len("diff --git ") :]
    quoted = _QUOTED_PAIR.match(rest)
    if quoted:
        old, new = (_unquote(part) for part in quoted.groups())
    else:
        half = (len(rest) - 1) // 2
        old, new = rest[:half], rest[half + 1 :]
        if rest[half : half + 1] != " " or old[2:] != new[2:]:
            different = _DIFFERENT_PATHS.match(rest)  # a rename written by another tool: paths without spaces
            if different is None:
                return None
            old, new = different.groups()
    if not (old.startswith("a/") and new.startswith("b/")):
        return None
    return old[2:], new[2:]


def file_sections(diff: str) -> list[str]:
    """The per-file sections of a patch's diff, each from its ``diff --git`` line to the next (text before the first,
    such as a message and a diffstat, is dropped)."""
    return _FILE_SECTION_START.split(diff)[1:]


def hunks(section: str) -> list[list[tuple[str, int, str]]]:
    """The tool's one reader of diff hunks: the hunks of ``section`` (one file's part of a unified diff), each as its
    lines ``(marker, number, text)``: the marker (`` ``, ``+`` or ``-``), the line's number in the new file (for a
    ``-`` line, the number the next new line has) and its text. Each hunk is as long as its header says, so
    that a line after the last one (format-patch's signature ``-- ``) is never read as one of its lines."""
    result = []
    lines = iter(section.split("\n"))
    for line in lines:
        header = _HUNK.match(line)
        if header is None:
            continue
        old, number, new = (int(count) if count is not None else 1 for count in header.groups())
        hunk: list[tuple[str, int, str]] = []
        while old > 0 or new > 0:
            line = next(lines, "")
            marker = line[:1]
            if marker == "\\":  # "\ No newline at end of file"
                continue
            if marker not in (" ", "+", "-"):
                break
            hunk.append((marker, number, line[1:].removesuffix("\r")))
            if marker != "-":
                number, new = number + 1, new - 1
            if marker != "+":
                old -= 1
        result.append(hunk)
    return result


def section_path(section: str) -> str:
    """The path a section of :func:`file_sections` changes (the new path of a rename), or ``""`` if its header is not
    a ``diff --git`` line."""
    paths = diff_paths(section.split("\n", 1)[0])
    return paths[1] if paths else ""


def _unquote(text: str) -> str:
    """Undo git's C-style quoting of a path: backslash escapes, and octal escapes for the bytes of UTF-8."""
    data = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\":
            data += char.encode()
            index += 1
        elif text[index + 1 : index + 2].isdigit():
            data.append(int(text[index + 1 : index + 4], 8))
            index += 4
        else:
            data.append(_C_ESCAPES.get(text[index + 1 : index + 2], ord(text[index + 1 : index + 2] or "\\")))
            index += 2
    return data.decode("utf-8", errors="replace")


def fingerprint(patches: list[Patch]) -> str:
    """A digest of the series' content: the same series always gives the same value."""
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(patch.name.encode() + b"\0" + patch.path.read_bytes() + b"\0")
    return digest.hexdigest()


def _subject(lines: list[str]) -> str | None:
    """The ``Subject:`` header without its ``[PATCH]`` prefix, unfolded (long subjects continue on indented lines)."""
    for index, line in enumerate(lines):
        match = _SUBJECT.match(line)
        if match:
            parts = [match.group(1)]
            for continuation in lines[index + 1 :]:
                if not continuation.startswith(" "):
                    break
                parts.append(continuation.strip())
            return " ".join(parts)
    return None


def _trailers(lines: list[str]) -> list[tuple[str, str]]:
    """The ``Key: value`` trailer block that ends the commit message (just before the ``---`` separator)."""
    try:
        end = lines.index("---")
    except ValueError:
        return []
    block: list[tuple[str, str]] = []
    for line in reversed(lines[:end]):
        match = _TRAILER.match(line)
        if not match:
            break
        block.append((match.group(1), match.group(2)))
    return list(reversed(block))
