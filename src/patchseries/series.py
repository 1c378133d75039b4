"""The ordered patch list (``patches/series``, quilt style), its patch files, and the one reader of their diffs."""

from __future__ import annotations

import codecs
import email.policy
import hashlib
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from email.parser import HeaderParser
from functools import cached_property
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.gitcmd import ENCODING_ERRORS, git, git_path, has_path, out
from patchseries.lock import series_lock

FORMAT_PATCH_OPTIONS = (  # output independent of the machine, the git version's signature and user configuration
    "--zero-commit", "--no-signature", "--no-numbered", "--full-index", "--no-renames", "--no-cover-letter",
    "--no-thread", "--no-to", "--no-cc", "--subject-prefix=PATCH", "--stat=80", "--encode-email-headers",
    "--no-add-header", "--no-attach",
)  # fmt: skip
SERIES_HEADER = (
    "# Applied in this order by `git am`; regenerate with `patchseries export`, never edit patches by hand.\n"
)
_STATUS_LINE = re.compile(r"(?im)^[ \t]*upstream-status[ \t]*:")  # DEP-3 keys are case-insensitive
FROM_HEADER = re.compile(r"^From: (?P<identity>.*(?:\n[ \t].*)*)", re.MULTILINE)  # with its continuation lines
RECORD = ".patchseries-exported"  # in the series folder: the blob id of each file the last export wrote
WRITER = ".writer"  # a name in RECORD; its "blob": a hash of the path of the checkout forward wrote it from
EXPORT_STAGING = ".patchseries-export-"  # export's fresh folder in the series folder; left there, a switch cut short


@dataclass(frozen=True)
class FileChange:
    path: str
    kind: str  # "new", "deleted" or "modified"


@dataclass(frozen=True)
class Patch:
    path: Path
    subject: str
    changes: tuple[FileChange, ...]
    message: str = ""  # the message ``git am`` commits

    @property
    def name(self) -> str:
        return self.path.name

    @cached_property
    def trailers(self) -> list[tuple[str, str]]:  # of the message ``git am`` commits
        return trailers(self.message, self.name)

    def trailer(self, key: str) -> str:  # the first ``key:`` trailer's value, any case, or ""
        return next((value for name, value in self.trailers if name.lower() == key.lower()), "")

    @property
    def new_files(self) -> list[str]:
        return [c.path for c in self.changes if c.kind == "new"]

    @property
    def touched_existing(self) -> list[str]:
        return [c.path for c in self.changes if c.kind != "new"]


def read_series(series_file: Path) -> list[Patch]:
    if not series_file.is_file():
        raise SeriesError(f"series file {series_file} does not exist")
    directory = series_file.parent.resolve()
    seen: dict[Path, int] = {}  # by the file itself: ./0001-x.patch and 0001-x.patch are one patch
    patches = []
    for number, name in _listed(series_file):
        resolved = (path := series_file.parent / name).resolve()
        if directory not in resolved.parents:
            raise SeriesError(f"{series_file} line {number} names {name}, outside {directory}; list "
                              "patch files of that folder only")  # fmt: skip
        if resolved in seen:
            raise SeriesError(f"{series_file} lists {name} twice (lines {seen[resolved]} and {number}); list each once")
        seen[resolved] = number
        if not path.is_file():
            what = "is not a file" if path.exists() else "does not exist"
            raise SeriesError(f"series names {name}, but {path} {what}; restore that file, or remove "
                              f"line {number} from {series_file}")  # fmt: skip
        patches.append(parse_patch(path))
    if not patches:
        raise SeriesError(f"{series_file} lists no patches; list the patch file names in it, one a line")
    return patches


def cut_short(folder: Path) -> list[Path]:  # export's folders left in ``folder``; a file or link so named is a person's
    return [path for path in folder.glob(f"{EXPORT_STAGING}*") if path.is_dir() and not path.is_symlink()]


def snapshot_series(folder: Path, into: Path) -> list[Patch]:
    """The series of ``folder`` copied with ``base.toml`` into scratch ``into`` under its lock, once a command."""
    if not into.is_dir():
        with series_lock(folder):
            if cut := next(iter(cut_short(folder)), None):  # a live export holds the lock: a killed one's
                rm, status = shlex.join(["rm", "-r", str(cut)]), shlex.join(["git", "-C", str(folder), "status"])
                raise SeriesError(f"an export into {folder} was cut short ({cut.name} is left; its series may be half "
                                  f"switched): run it again (export or forward), or, without its tree, `{rm}` once "
                                  f"`{status}` shows the series you want")  # fmt: skip
            patches = read_series(folder / "series")  # a broken series is refused before anything is copied
            names = {p.path: os.path.relpath(p.path.resolve(), folder.resolve()) for p in patches}  # normalised
            for source, name in [(folder / "base.toml", "base.toml"), *names.items()]:
                (into / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, into / name)
            (into / "series").write_text("".join(f"{name}\n" for name in names.values()))
    return read_series(into / "series")


def listed_names(series_file: Path) -> list[str]:
    if not series_file.is_file():
        return []
    names = (os.path.normpath(name) for _, name in _listed(series_file))
    return [name for name in names if "/" not in name and name not in (".", "..")]


def _listed(series_file: Path) -> list[tuple[int, str]]:
    try:  # a byte order mark would otherwise be part of the first name
        lines = series_file.read_bytes().decode().removeprefix("\ufeff").split("\n")  # not at U+2028: as sed counts
    except UnicodeDecodeError as exc:
        raise SeriesError(f"{series_file} is not UTF-8 text ({exc.reason} at byte {exc.start}); list the patch file "
                          "names in UTF-8") from None  # fmt: skip
    names = [(number, line.split("#", 1)[0].strip()) for number, line in enumerate(lines, 1)]
    for number, name in names:
        if any(ord(char) < 32 for char in name):
            raise SeriesError(f"{series_file} line {number} is not a file name: {name!r}; list the patch file names")
    return [(number, name) for number, name in names if name]


def parse_patch(path: Path) -> Patch:
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    headers = HeaderParser(policy=email.policy.default).parsestr(text.removeprefix("\ufeff"))  # BOM: am says why
    subject = headers["Subject"]  # unfolded, RFC 2047 decoded
    changes: list[FileChange] = []
    for index, line in enumerate(lines):
        if (header := diff_paths(line)) is None:
            continue
        following = "\n".join(lines[index + 1 : index + 3])
        kind = "new" if "new file mode" in following else "deleted" if "deleted file mode" in following else "modified"
        changes.append(FileChange(path=header[1] if kind != "deleted" else header[0], kind=kind))
    if subject is None or not changes:
        raise SeriesError(f"{path.name} is not a git format-patch file (no Subject: header or no diff)")
    if (mails := am_reads(path))[2] > 1:  # `git am` would make a commit of each
        raise SeriesError(f"{path.name} holds {mails[2]} patches (a line 'From <word> <date>' starts one); git "
                          "format-patch writes one a file: split it")  # fmt: skip
    raw = path.read_bytes() if keep_cr(path) else path.read_bytes().replace(b"\r\n", b"\n")  # as git am reads it
    diff = mails[3].encode(errors=ENCODING_ERRORS)  # what git am applies: the file's own text, and its only diff
    if not raw.endswith(diff) or b"\ndiff --git " in raw[: len(raw) - len(diff)]:
        raise SeriesError(f"{path.name}: git am reads other changes than its text shows (an encoded mail, an "
                          "attachment); write it as git format-patch does")  # fmt: skip
    if (check := git("apply", "--numstat", path, check=False)).returncode != 0:
        raise SeriesError(f"{path.name} is malformed: {(check.stderr.strip().splitlines() or ['unreadable diff'])[-1]}")
    return Patch(path, re.sub(r"^\[[^\]]*\] ", "", str(subject)), tuple(changes), mails[1])  # subject less [PATCH]


def am_reads(path: Path, cwd: Path | None = None, within: Path | None = None) -> tuple[dict[str, str], str, int, str]:
    """What ``git am`` reads from a patch file: mailinfo's fields, its message, how many mails, the first's diff."""
    with tempfile.TemporaryDirectory(dir=within) as scratch:  # a line "From <word> <date>" starts another mail
        count = int(out("mailsplit", "-b", *keep_cr(path), f"-o{scratch}", path, cwd=cwd))
        mail = (Path(scratch) / "0001").read_bytes().decode(errors=ENCODING_ERRORS)  # as is: CRs too
        info = git("mailinfo", *(Path(scratch) / n for n in ("info", "diff")), cwd=cwd, stdin=mail).stdout.split("\n")
        fields = dict(line.split(": ", 1) for line in info if ": " in line)
        body, diff = ((Path(scratch) / n).read_bytes().decode(errors=ENCODING_ERRORS) for n in ("info", "diff"))
    return fields, git("stripspace", cwd=cwd, stdin=f"{fields.get('Subject', '')}\n\n{body}").stdout, count, diff


def trailers(message: str, name: str = "") -> list[tuple[str, str]]:
    """The ``(key, value)`` trailers git reads in ``message``; with ``name``, its status lines must be one trailer."""
    parse = ("-c", "trailer.separators=:", "interpret-trailers", "--parse", "--no-divider")  # no repository's trailer.*
    parsed = git(*parse, env={"GIT_DIR": os.devnull}, stdin=message).stdout.split("\n")[:-1]  # a U+2028 stays
    found = [(key.strip(), value.strip()) for key, _, value in (line.partition(":") for line in parsed)]
    statuses = [value for key, value in found if key.lower() == "upstream-status"]
    if name and (seen := len(_STATUS_LINE.findall(message.partition("\n")[2])), len(statuses)) not in ((0, 0), (1, 1)):
        raise SeriesError(f"{name}: git reads {len(statuses)} of its {seen} Upstream-Status lines as a trailer; keep "
                          "one, in the last paragraph, which holds trailers only")  # fmt: skip
    return found


def without_author(patch: bytes) -> bytes:
    """A patch file's bytes less its ``From:`` header (what ``--author`` sets; the rest is the commit's)."""
    text = patch.decode(errors="surrogateescape")
    found = FROM_HEADER.search(text.split("\n\n", 1)[0])  # a mail header, not a ``From:`` line of the message
    return patch if found is None else (text[: found.start()] + text[found.end() :]).encode(errors="surrogateescape")


def has_crlf(patch: Path) -> bool:
    """Whether a patch file was converted to CRLF line endings: its ``From`` line, which git writes, ends in CR."""
    with patch.open("rb") as handle:
        return handle.readline().endswith(b"\r\n")


def crlf_problem(path: Path, name: str | None = None) -> str:
    convert = f"convert it back with `perl -pi -e 's/\\r$//' {shlex.quote(str(path))}`"
    return f"{name or path.name} has CRLF line endings, which export does not write; {convert}"


def keep_cr(patch: Path) -> list[str]:  # git am's --keep-cr (a file's own CRs), unless the patch file is CRLF itself
    return [] if has_crlf(patch) else ["--keep-cr"]


def dropped_hunks(repo: Path, base: str, committed: list[Patch], lacks: tuple[str, ...],
                  exported: list[Path] | None = None) -> list[str]:  # fmt: skip
    """What an export drops: each patch's hunks for ``lacks`` paths that neither the base nor an earlier patch adds."""
    if not lacks:
        return []
    exported_new = {path for patch in exported or [] for path in parse_patch(patch).new_files}
    new: set[str] = set()  # the whole series is compared: a reworded or skipped patch cannot hide a loss
    dropped = []
    for old in committed:
        lost = [p for p in old.touched_existing if p.startswith(lacks) and p not in new and not has_path(repo, p, base)]
        if lost:
            shown = [f"{p} (replaced by a new file there)" if p in exported_new else p for p in lost]
            dropped.append(f"{old.name}'s hunks for {', '.join(shown)}")
        new.update(old.new_files)
    return dropped


def diff_paths(line: str) -> tuple[str, str] | None:
    """A ``diff --git`` line's old and new path, or ``None``: equal halves, else C-quoted ones, else a plain rename."""
    if not line.startswith("diff --git "):
        return None
    rest = line[len("diff --git ") :]
    if quoted := re.match(r'^"((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)"$', rest):
        # undo git's C quoting: backslash and octal escapes, the latter for the bytes of UTF-8
        old, new = (codecs.escape_decode(part.encode())[0].decode(errors="replace") for part in quoted.groups())
    else:
        half = (len(rest) - 1) // 2
        old, new = rest[:half], rest[half + 1 :]
        if rest[half : half + 1] != " " or old[2:] != new[2:]:
            if (different := re.match(r"^(a/\S+) (b/\S+)$", rest)) is None:  # a rename written by another tool
                return None
            old, new = different.groups()
    return (old[2:], new[2:]) if old.startswith("a/") and new.startswith("b/") else None


def file_sections(diff: str) -> list[str]:
    return re.split(r"(?m)^(?=diff --git )", diff)[1:]


def section_path(section: str) -> str:  # the (new) path a section changes, or ""
    paths = diff_paths(section.split("\n", 1)[0])
    return paths[1] if paths else ""


def hunks(section: str) -> list[list[tuple[str, int, str]]]:
    """The one reader of hunks: ``(marker, number in the new file, text less CR)``, as many as the header says."""
    result = []
    lines = iter(section.split("\n"))
    for line in lines:
        if (header := re.match(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", line)) is None:
            continue
        old, number, new = (int(count) if count is not None else 1 for count in header.groups())
        hunk: list[tuple[str, int, str]] = []
        while old > 0 or new > 0:
            line = next(lines, "\0")  # past the section's end: no marker, the hunk ends
            marker = line[:1] or " "  # an empty line: a blank context line an editor trimmed, as git apply reads it
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


def blob_id(data: bytes) -> str:  # as git hash-object names ``data``
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def fingerprint(patches: list[Patch]) -> str:
    return hashlib.sha256(b"".join(p.name.encode() + b"\0" + p.path.read_bytes() + b"\0" for p in patches)).hexdigest()


def recorded_blobs(folder: Path) -> set[tuple[str, str]]:  # the last export's (name, blob)s; a name twice mid-switch
    lines = (folder / RECORD).read_text(errors=ENCODING_ERRORS).splitlines() if (folder / RECORD).is_file() else []
    return {(name, blob) for blob, _, name in (line.partition(" ") for line in lines)}


def committed_blobs(folder: Path) -> dict[str, str]:  # each file of ``folder`` at HEAD: its blob id (none outside git)
    entries = git("-C", folder, "ls-tree", "-z", "HEAD", ".", check=False).stdout.split("\0")
    return {entry.split("\t", 1)[1]: entry.split()[2] for entry in entries if "\t" in entry}


def format_patches(repo: Path, commits: str, into: Path) -> list[tuple[str, str]]:  # as export writes: (name, blob)
    """``git format-patch`` in a fresh repository borrowing ``repo``'s objects: none of its settings or attributes."""
    with tempfile.TemporaryDirectory(dir=into) as fresh:
        git("init", "--quiet", "--bare", fresh)
        (Path(fresh) / "objects/info/alternates").write_text(f"{git_path(repo, 'objects').absolute()}\n")  # `:` too
        ends = out("rev-parse", commits, cwd=repo).split()  # B ^A for A..B
        git("format-patch", *FORMAT_PATCH_OPTIONS, "--output-directory", into, *ends, cwd=Path(fresh))
    (into / "series").write_text(SERIES_HEADER + "".join(f"{path.name}\n" for path in sorted(into.glob("*.patch"))))
    return [(path.name, blob_id(path.read_bytes())) for path in [*sorted(into.glob("*.patch")), into / "series"]]
