"""`forward` and `check --onto`: the release series tried patch by patch on another upstream commit; `forward` writes
each patch upstream lacks (not ``Inappropriate``) without DEP-3 trailers, its CHANGELOG entries re-placed there."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from patchseries.errors import SeriesError
from patchseries.export import export_series, scratch_clone
from patchseries.gitcmd import ENCODING_ERRORS, TOOL_IDENTITY, failure_cause, git, git_path, out
from patchseries.interrupts import stage
from patchseries.paths import tool_command
from patchseries.pin import Pin
from patchseries.progress import Log, quiet
from patchseries.series import Patch, file_sections, hunks, keep_cr, section_path, trailers
from patchseries.trees import already_present, failed_files, fetch_advice, literal, refuse_operation_in_progress

_CHANGELOG = re.compile(r"(^|/)CHANGELOG\.md$")
DEP3_KEYS = ("Upstream-Status", "Forwarded", "Origin", "Bug", "Applied-Upstream", "Last-Update", "Description")
_DEP3 = re.compile(rf"(?i)({'|'.join(DEP3_KEYS)}|Bug-[a-z0-9-]+)")  # any case: the release's trailers, not upstream's
_KEY = re.compile(r"([A-Za-z0-9-]+)[ \t]*:")  # a trailer's key as git reads it
_STATUSES = ("pending", "submitted", "accepted", "backport", "denied", "inactive-upstream", "inappropriate")
_HEADINGS = ("### Added", "### Changed", "### Deprecated", "### Removed", "### Fixed", "### Security")  # in this order


class Outcome(NamedTuple):  # status: "already upstream", "release only", "forwarded", "applies cleanly", "conflicts"
    patch: str
    status: str
    detail: str = ""


def check_onto(upstream: Path, ref: str, patches: list[Patch], scratch: Path) -> list[Outcome]:  # cloned in scratch
    with scratch_clone(upstream, _commit(upstream, ref, "the ref"), scratch) as repo:
        return [_try(repo, patch) for patch in patches]


def forward_series(
    upstream: Path, release: Pin, patches: list[Patch], target: Pin, out_dir: Path, scratch: Path,
    author: str | None = None, check: str = tool_command("check"), log: Log = quiet,
) -> list[Outcome]:  # fmt: skip
    """Write the forward series onto ``target.commit`` into ``out_dir`` (other files kept), made under ``scratch``."""
    upstream, out_dir = upstream.resolve(), out_dir.resolve()
    refuse_operation_in_progress(upstream)  # its refs may be anywhere until the operation ends
    patches = [replace(patch, path=patch.path.absolute()) for patch in patches]
    tag = _commit(upstream, f"refs/tags/{release.tag}", "the release's tag")
    onto = _commit(upstream, target.commit, "the pinned commit")
    with scratch_clone(upstream, tag, scratch) as repo:
        stage("forward-scratch")
        entries = {patch.name: _entries(repo, patch, release.tag, check) for patch in patches}  # in series order
        git("checkout", "--quiet", "-B", "forward", onto, cwd=repo)
        results = [_forward_one(repo, patch, entries[patch.name]) for patch in patches]
        if any(r.status == "conflicts" for r in results):
            return results
        if not any(r.status == "forwarded" for r in results):
            raise SeriesError(f"no patch of the series is left to forward onto {target.commit[:12]}")
        export_series(repo, out_dir, "forward", onto, author=author, refuse_placeholder_authors=True, log=log,
                      writer=str(upstream))  # fmt: skip
    return results


def _commit(repo: Path, ref: str, what: str) -> str:
    if (proc := git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=repo, check=False)).returncode != 0:
        raise SeriesError(f"{repo} lacks {what} {ref!r}; {fetch_advice(repo)} and re-run")
    return proc.stdout.strip()


def _try(repo: Path, patch: Patch) -> Outcome:
    """``patch`` on HEAD, CHANGELOGs aside: already upstream by the tree (not history), applied as written, or not."""
    new = patch.new_files  # a CHANGELOG it creates is carried whole, every hunk of it
    options = [f"--exclude={literal(c.path)}" for c in patch.changes if _CHANGELOG.search(c.path) and c.path not in new]
    if len(options) < len(patch.changes) and already_present(repo, patch.path, options):
        return Outcome(patch.name, "already upstream", "changes present, CHANGELOG entries aside")
    head, wanted = out("rev-parse", "HEAD", cwd=repo), out("apply", "--numstat", *options, patch.path, cwd=repo)
    merged = _merged(repo, patch, options)  # by the files' history: git am's apply matches a hunk's context anywhere
    proc = git("am", "--3way", *keep_cr(patch.path), *options, patch.path, cwd=repo, env=TOOL_IDENTITY, check=False)
    if proc.returncode == 0 and out("rev-parse", "HEAD", cwd=repo) == head:  # "No changes -- Patch already applied"
        news = [f"--include={literal(path)}" for path in patch.new_files]  # the merge keeps upstream's for an empty one
        if already_present(repo, patch.path, [*options, *news]) if news else True:
            return Outcome(patch.name, "already upstream", "git am --3way finds its changes there")
        return Outcome(patch.name, "conflicts", f"{', '.join(patch.new_files)}: upstream has its own")
    clean = proc.returncode == 0 and merged == out("rev-parse", "HEAD^{tree}", cwd=repo)  # git am and a merge agree
    if clean and {*out("diff", "--numstat", head, "HEAD", cwd=repo).split("\n")} == {*wanted.split("\n")}:
        return Outcome(patch.name, "applies cleanly")
    files = failed_files(repo, proc) if proc.returncode else ["git am --3way wrote other lines, or at other places"]
    git("am", "--quit", cwd=repo, env=TOOL_IDENTITY, check=False)  # the next patch is tried alone, on a clean tree
    git("reset", "--quiet", "--hard", head, cwd=repo, env=TOOL_IDENTITY)
    return Outcome(patch.name, "conflicts", ", ".join(files) or failure_cause(proc))


def _merged(repo: Path, patch: Patch, options: list[str]) -> str:  # "": no 3-way merge by the blobs it names, conflicts
    pre, post, merge = ({"GIT_INDEX_FILE": str(git_path(repo, f"patchseries-{n}"))} for n in ("pre", "post", "merge"))
    fake = [f"--build-fake-ancestor={pre['GIT_INDEX_FILE']}"], ["-R", f"--build-fake-ancestor={post['GIT_INDEX_FILE']}"]
    git("read-tree", "HEAD", cwd=repo, env=merge)
    # the blobs its index lines name exist and it turns the ones into the others (else git applies it by its context)
    for step, env in zip([*fake, ["--cached"], ["--cached", "--3way"]], (None, None, pre, merge), strict=True):
        if git("apply", *step, *options, patch.path, cwd=repo, env=env, check=False).returncode:
            return ""
    blobs = ("ls-files", "--format=%(objectname) %(path)")  # not the modes: git -R takes a gitlink's as a file's
    named = out(*blobs, cwd=repo, env=pre) == out(*blobs, cwd=repo, env=post)
    return out("write-tree", cwd=repo, env=merge) if named else ""


def _forward_one(repo: Path, patch: Patch, entries: list[tuple[str, str, str]]) -> Outcome:
    if release_only(patch):  # DEP-3: a release-only workaround, which upstream will not take; why, less "Inappropriate"
        return Outcome(patch.name, "release only", patch.trailer("Upstream-Status")[13:].strip(" []"))
    if (result := _try(repo, patch)).status != "applies cleanly":
        return result
    for changelog, heading, text in entries:
        if add_entry(repo, changelog, heading, text):
            git("add", changelog, cwd=repo)
    if not out("diff", "--cached", "--name-only", "HEAD~1", cwd=repo):  # only entries, and the target has them
        git("reset", "--quiet", "--hard", "HEAD~1", cwd=repo)
        return Outcome(patch.name, "already upstream", "its CHANGELOG entries are there")
    message = forward_message(out("log", "-1", "--format=%B", cwd=repo))
    git("commit", "--quiet", "--amend", "--no-verify", "-m", message, cwd=repo, env=TOOL_IDENTITY)
    return Outcome(patch.name, "forwarded")


def release_only(patch: Patch) -> bool:  # by its status, which forward needs: a typo in the key is no status
    if (status := re.split(r"[^\w-]", patch.trailer("Upstream-Status").lower(), maxsplit=1)[0]) not in _STATUSES:
        raise SeriesError(f"{patch.name} has no Upstream-Status trailer git reads with a value forward knows: write "
                          f"one ({', '.join(_STATUSES)}) in its last paragraph, of trailers")  # fmt: skip
    return status == "inappropriate"


def forward_message(message: str) -> str:
    """``message`` less its DEP-3 trailers and their continuation lines; other trailers and the body paragraphs stay."""
    if not any(_DEP3.fullmatch(key) for key, _ in trailers(message)):  # git's reading: no other trailer reader
        return message
    *body, last = message.strip("\n").split("\n\n")  # git reads the last paragraph as trailers
    kept, dropping = [], False
    for line in last.split("\n"):
        dropping = dropping if line[:1] in (" ", "\t") else bool((key := _KEY.match(line)) and _DEP3.fullmatch(key[1]))
        kept += [] if dropping else [line]
    forwarded = "\n\n".join([*body, "\n".join(kept)] if kept else body) + "\n"
    if any(_DEP3.fullmatch(key) for key, _ in trailers(forwarded)):  # the paragraph before reads as trailers
        raise SeriesError(f"git reads DEP-3 trailers in {message.partition(chr(10))[0]!r} once they go; reword it")
    return forwarded


def _entries(repo: Path, patch: Patch, tag: str, check: str) -> list[tuple[str, str, str]]:
    """Apply ``patch`` on ``repo`` (the release series so far): ``(changelog, heading, entry)`` per entry it adds."""
    only = release_only(patch)  # its entries stay in the release series
    if git("am", "--quiet", *keep_cr(patch.path), patch.path, cwd=repo, env=TOOL_IDENTITY, check=False).returncode:
        raise SeriesError(f"{patch.name} does not apply to tag {tag}; run `{check}` first")
    if only:
        return []
    entries, others = changelog_entries(git("show", "--format=", "HEAD", cwd=repo).stdout)  # as git am read the mail
    if others:
        raise SeriesError(f"{patch.name} {others[0]}: forward carries `- ` entries with indented lines only; write "
                          "it so, or move it to a patch marked `Upstream-Status: Inappropriate [why]`")  # fmt: skip
    found = []
    for path, index, entry in entries:
        above = (repo / path).read_bytes().decode(errors=ENCODING_ERRORS).split("\n")[:index]  # a CR is no line end
        found.append((path, next((h.strip() for h in reversed(above) if h.startswith("### ")), "### Changed"), entry))
    return found


def changelog_entries(text: str) -> tuple[list[tuple[str, int, str]], list[str]]:
    """``(path, index in the post-image, entry)`` per entry a patch adds to a CHANGELOG (a ``- ``, ``* `` or ``+ ``
    item with its indented lines, blank ones between them too), and each other line it adds or removes there."""
    found: list[tuple[str, int, str]] = []
    others: list[str] = []
    created = {section_path(s) for s in file_sections(text) if "\nnew file mode " in s.split("@@")[0]}  # carried whole
    for section in file_sections(text):
        if _CHANGELOG.search(path := section_path(section)) and path not in created:
            for hunk in hunks(section):
                current, blank = None, ""  # the entry that an added, indented line continues; blank lines since
                for marker, number, line in hunk:
                    if marker == "+" and line[:2] in ("- ", "* ", "+ "):
                        current, blank = len(found), ""
                        found.append((path, number - 1, line))
                    elif marker == "+" and not line.strip():
                        blank += "\n"
                    elif marker == "+" and current is not None and line[:1] in (" ", "\t"):
                        found[current], blank = (path, found[current][1], f"{found[current][2]}{blank}\n{line}"), ""
                    elif marker == " " or line.strip() in ("", "-") or marker == "+" and re.match(r"#+( |$)", line):
                        current = None
                    else:
                        others.append(f"{'adds' if marker == '+' else 'removes'} {line[:60]!r} in {path}")
    return found, others


def add_entry(repo: Path, changelog: str, heading: str, entry: str) -> bool:
    """Add ``entry`` at the end of ``heading``'s list in the unreleased section; False if it is there already."""
    text = (repo / changelog).read_bytes().decode() if (repo / changelog).is_file() else ""
    cr = "\r" if "\r\n" in text else ""  # the file's line endings: the diff is the entry alone
    lines = text.removesuffix("\n").split("\n")  # only "\n" ends a line (not a CR, nor U+2028); each keeps its CR
    if (start := next((i for i, line in enumerate(lines) if line.lower().startswith("## [unreleased]")), None)) is None:
        raise SeriesError(f"the target's {changelog} has no '## [unreleased]' section for the series' entries")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"#{1,2}( |$)", lines[i])), len(lines))  # h1, h2
    rule = r" {0,3}([-*_])( *\1){2,} *"  # a thematic break (`---`, `* * *`): the end of a release's section
    end = max(i for i in range(start, end) if not re.fullmatch(f"(?:{rule})?\\s*", lines[i])) + 1  # less its rule
    block = [f"{line}{cr}" for line in entry.split("\n")]
    plain, size, offset = [line.removesuffix("\r") for line in lines[start:end]], len(block), 0
    odd = [i for i in range(start) if lines[i].lstrip()[:1] in ("`", "~", "<")]  # code, a comment or HTML above it
    for i, line in enumerate(plain[1:], start + 1):  # as changelog_entries (and CommonMark) read lists
        marker = re.match(r"[-*+](?: {1,4}(?=\S)| |\t)", line)  # an item with text: its lines are indented so far
        offset = len(marker[0]) if marker else 0 if re.match(r"#+( |$)|[-*+]\s*$", line) else offset
        fits = re.match(r"#+( |$)|[-*+]( |$)", line) and not re.fullmatch(rule, line)  # a heading or an item
        if line.strip() and not (fits or offset and line.startswith((" " * offset, "\t"))):
            odd.append(i)
    if odd:
        raise SeriesError(f"forward reads [unreleased] of the target's {changelog} as a list (items, indented lines, "
                          f"headings) after text with no code or comment; line {odd[0] + 1} is not "
                          f"({lines[odd[0]].strip()[:30]!r}): pin a commit whose list it reads")  # fmt: skip

    def there(i: int) -> bool:  # every line of it (any bullet), CRs aside, and no line of its (indented) after it
        after = next((line for line in plain[i + size :] if line.strip()), "")
        lines_at = [plain[i][2:], *plain[i + 1 : i + size]] if plain[i][:2] in ("- ", "* ", "+ ") else []
        return lines_at == entry[2:].split("\n") and not after[:1].isspace()

    if any(map(there, range(len(plain)))):
        return False
    headings = [i for i in range(start + 1, end) if lines[i].startswith("### ")]
    mine = next((i for i in headings if lines[i].strip() == heading), None)
    if mine is None:  # a new heading, before the first heading that follows it in Keep a Changelog's order
        later = _HEADINGS[_HEADINGS.index(heading) + 1 :] if heading in _HEADINGS else ()
        first, stop = start, next((i for i in headings if lines[i].strip() in later), end)
        block = [f"{heading}{cr}", cr, *block]
    else:
        first, stop = mine, next((i for i in headings if i > mine), end)
    texts = [i for i in range(first + 1, stop) if lines[i].strip()]
    if mine is not None and [lines[i].strip() for i in texts] == ["-"]:
        lines[texts[0] : texts[0] + 1] = block
    else:
        at = (texts[-1] if texts else first) + 1
        lines[at:at] = [cr, *block]
    (repo / changelog).write_bytes(("\n".join(lines) + "\n" * text.endswith("\n")).encode())  # a last one as it was
    return True
