"""Which patch files of a series folder an export may remove or overwrite: those whose bytes show nothing is lost.

A file's name says nothing of who made it: a person lists a patch of their own, ``0015-my-own.patch``, in ``series``,
which an export must not delete. So an export replaces a file only when its bytes are

1. what this export writes anyway, under its name (less the number: ``0010-`` for ``0011-``), or under another name
   when no other listed file holds those bytes (a patch of the person's that they put on the branch, exported under
   its commit's subject);
2. its committed version in the project's git (``HEAD`` or the index), which git keeps; or
3. what an export of a commit of the exported repository writes, a commit of its branch or of its reflogs, under the
   name an export gives that commit, less its number: an earlier export of a commit since reworded or amended, which
   that repository keeps; or
4. those of another file of the folder that the export leaves as it is: a copy the person kept (``cp F F.mine``, the
   refusal's remedy).

Anything else may be a person's, and the export is refused, naming it: also a byte copy of an exported patch under a
name of the person's own (``cp 0015-X.patch 0016-my-own.patch``, listed in ``series``), whose
name no export gives. The ``From:`` header aside in 1 and 3: the
author is what an export's ``--author`` sets, the rest of a patch is its commit's; and in 1 and 3 a patch converted to
CRLF line endings is compared with its line endings as exported, which is all that such a conversion changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchseries.gitcmd import ENCODING_ERRORS, git, out, patch_id_of_file, patch_ids
from patchseries.series import diff_paths, without_author


@dataclass(frozen=True)
class Unexported:
    """A file of the series folder that an export would remove or overwrite, and that no export can be shown to have
    written."""

    path: Path
    overwritten: bool  # the export writes a file of that name (else it would remove the file)
    on_branch: str  # the commit of the exported branch that makes the same change (same patch id), or ""


def unexported(
    folder: Path,
    listed: Sequence[str],
    written: Sequence[Path],
    repo: Path,
    base: str,
    branch: str,
    formatted: Callable[[str], bytes],
) -> list[Unexported]:
    """The files ``listed`` in ``folder`` that an export writing ``written`` (its staged patches) would remove or
    overwrite with other bytes, and whose bytes none of the rules of this module shows to be an export's.

    ``formatted``: what the export writes for a commit of ``repo``; ``base``..``branch``: the commits it exports.
    """
    produced = {path.name: without_author(path.read_bytes()) for path in written}
    kept = [path for path in folder.iterdir() if path.name not in {*listed, *produced} and path.is_file()]
    found = []

    def others(name: str) -> list[bytes]:  # what the other listed files hold, as exported
        return [
            without_author(_as_exported((folder / n).read_bytes()))
            for n in listed
            if n != name and (folder / n).is_file()
        ]

    for name in listed:
        path = folder / name
        if not path.is_file():
            continue  # nothing there to lose
        data = path.read_bytes()
        if _copied(data, kept) or _committed(path):
            continue
        data = _as_exported(data)
        made = [made for made, bytes_ in produced.items() if bytes_ == without_author(data)]
        if made and (any(_slug(m) == _slug(name) for m in made) or without_author(data) not in others(name)):
            continue
        same_change = _same_change(repo, path, base, branch)
        if any(
            without_author(formatted(commit)) == without_author(data) and _named_for(repo, commit, name)
            for commit in same_change
        ):
            continue
        on_branch = out("rev-list", f"{base}..{branch}", cwd=repo).split()
        found.append(Unexported(path, name in produced, next((c for c in same_change if c in on_branch), "")))
    return found


def _slug(name: str) -> str:
    """A patch file's name less its number and extension: what ``git format-patch`` makes of the subject."""
    stem = name.removesuffix(".patch")
    return stem.split("-", 1)[1] if re.match(r"\d{4}-", stem) else stem


def _named_for(repo: Path, commit: str, name: str) -> bool:
    """Whether ``name`` is what an export names ``commit``'s patch, less its number: ``format-patch`` writes the
    subject as ``git log --format=%f`` gives it, cut to its file name length."""
    slug = _slug(name)
    return bool(slug) and out("log", "-1", "--format=%f", commit, cwd=repo).startswith(slug)


def _as_exported(data: bytes) -> bytes:
    """A patch file's bytes with the line endings an export writes: a patch converted to CRLF line endings (its
    ``From`` line, which git writes, ends in CR; the drift check names it and tells to re-export it) loses nothing by
    being written again as exported, so the re-export the check names is not refused as a hand edit."""
    first = data.split(b"\n", 1)[0]
    return data.replace(b"\r\n", b"\n") if data.startswith(b"From ") and first.endswith(b"\r") else data


def _copied(data: bytes, kept: list[Path]) -> bool:
    """Whether one of the files ``kept`` holds ``data``."""
    return any(path.stat().st_size == len(data) and path.read_bytes() == data for path in kept)


def _committed(path: Path) -> bool:
    """Whether git keeps ``path``'s bytes: its version in ``HEAD`` or in the index of the repository around it."""
    top = next((folder for folder in path.parents if (folder / ".git").exists()), None)
    if top is None:
        return False
    relative = path.relative_to(top).as_posix()
    blob = git("hash-object", "--no-filters", "--", path, cwd=top, check=False).stdout.strip()
    for version in (f"HEAD:{relative}", f":{relative}"):  # committed, or staged
        if blob and git("rev-parse", "--verify", "--quiet", version, cwd=top, check=False).stdout.strip() == blob:
            return True
    return False


def _same_change(repo: Path, patch: Path, base: str, branch: str) -> list[str]:
    """The commits of ``repo`` that make the change of the patch file ``patch`` (the same patch id), of ``branch`` or
    of any reflog (a commit since reworded, amended or rebased away), on top of ``base``."""
    wanted = patch_id_of_file(patch)
    if not wanted:
        return []
    lines = patch.read_bytes().decode(errors=ENCODING_ERRORS).splitlines()
    paths = sorted({path for line in lines if (pair := diff_paths(line)) for path in pair})
    ids = patch_ids(repo, "--reflog", branch, "--not", base, paths=paths, check=False)
    return [commit for patch_id, commit in ids if patch_id == wanted]
