"""`forward` and `check --onto`: the release series tried patch by patch on another upstream commit; `forward` writes
each patch upstream lacks (not ``Inappropriate``) without DEP-3 trailers, its CHANGELOG entries re-placed there."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from html import unescape
from itertools import pairwise, zip_longest
from pathlib import Path
from typing import Any, NamedTuple

from cmarkgfm import Options, github_flavored_markdown_to_html
from markdown_it import MarkdownIt
from markdown_it.token import Token

from patchseries.errors import SeriesError
from patchseries.export import export_series, scratch_clone
from patchseries.gitcmd import TOOL_IDENTITY, commit_of, failure_cause, git, git_path, out
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
_MD = MarkdownIt("commonmark").enable("table")  # as GitHub reads a CHANGELOG: its tables too (`---` under one: a rule)
_LINES = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+$")  # each with its end, as CommonMark ends lines
_GITHUB = partial(github_flavored_markdown_to_html, options=Options.CMARK_OPT_SOURCEPOS | Options.CMARK_OPT_FOOTNOTES)
_BLOCK = r"h[1-6]|li|blockquote|hr|pre|table"  # not lists (tight or loose, one or two: the same items show)
_SOURCEPOS = re.compile(rf'<({_BLOCK})\b[^>]*? data-sourcepos="(\d+):\d+-(\d+):')  # raw HTML omitted: none forged
_HEADING_HTML = re.compile(r'<h[1-6] data-sourcepos="(\d+):[^>]*>(.*?)</h[1-6]>', re.DOTALL)  # what it shows: less tags
_Check = Callable[[int], None]  # refuses what forward cannot read above a line
_TAGS = re.compile(r'<(/?)\w+(?:[^>]*? data-sourcepos="(\d+):\d+-(\d+):)?[^>]*?(/?)>|(<!-- raw HTML omitted -->)')
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
    if not (commit := commit_of(repo, ref)):
        raise SeriesError(f"{repo} lacks {what} {ref!r}; {fetch_advice(repo)} and re-run")
    return commit


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
    added = [changelog for changelog, heading, entry in entries if add_entry(repo, changelog, heading, entry)]
    git("--literal-pathspecs", "add", "--", *added, cwd=repo)  # those alone, paths as written (no pathspec magic)
    if not out("diff", "--cached", "--name-only", "HEAD~1", cwd=repo):  # only entries, and the target has them
        git("reset", "--quiet", "--hard", "HEAD~1", cwd=repo)
        return Outcome(patch.name, "already upstream", "its CHANGELOG entries are there")
    message = forward_message(out("log", "-1", "--format=%B", cwd=repo))
    git("commit", "--quiet", "--amend", "--no-verify", "-m", message, cwd=repo, env=TOOL_IDENTITY)
    there = f"{len(entries) - len(added)} of its CHANGELOG entries there already" if len(added) < len(entries) else ""
    return Outcome(patch.name, "forwarded", there)


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
    if git("am", "--quiet", *keep_cr(patch.path), patch.path, cwd=repo, env=TOOL_IDENTITY, check=False).returncode:
        raise SeriesError(f"{patch.name} does not apply to tag {tag}; run `{check}` first")
    if release_only(patch):  # its entries stay in the release series
        return []
    entries, others = changelog_entries(git("show", "--text", "--format=", "HEAD", cwd=repo).stdout)  # a NUL's too
    if others:
        raise SeriesError(f"{patch.name} {others[0]}: forward carries `- ` entries with indented lines only; write "
                          "it so, or move it to a patch marked `Upstream-Status: Inappropriate [why]`")  # fmt: skip
    found, texts = [], {path: (repo / path).read_bytes().decode(errors="replace") for path, _, _ in entries}  # GitHub's
    reads = {path: _read(text, f"the release's {path} with {patch.name}", f"in {patch.name} or before") for path, text
             in texts.items()}  # fmt: skip
    for path, index, entry in entries:  # under the heading GitHub shows above it: CommonMark's lines, not git's
        line = len(_LINES.findall("".join(f"{part}\n" for part in texts[path].split("\n")[:index])))
        tokens, lines, shown, _, no_html_above = reads[path]
        _MD.parse(entry, defs := dict[str, Any]())  # its link definitions, which GitHub reads beyond its item
        if (item := _items(tokens, lines).get(line)) != re.sub(r"\r\n?", "\n", entry).rstrip() or defs:
            raise SeriesError(f"{patch.name} adds {entry.partition(chr(10))[0][:40]!r} where the release's {path} "
                              "shows no item of its own (in code, a comment, with lines it does not add, or with a "
                              "link definition GitHub reads beyond it): move it out, or drop it")  # fmt: skip
        no_html_above(line + item.count("\n") + 1)
        above = [(tag, title) for at, tag, title in shown if at < line and tag in ("h1", "h2", "h3")][-1:]  # its own
        found.append((path, f"### {above[0][1] if above and above[0][0] == 'h3' else 'Changed'}", entry))
    return found


def changelog_entries(text: str) -> tuple[list[tuple[str, int, str]], list[str]]:
    """``(path, post-image index, entry)`` per ``- ``/``* ``/``+ `` item a patch adds; each other line it changes."""
    found, others = list[tuple[str, int, str]](), list[str]()
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


class _Unreleased(NamedTuple):  # the target's [unreleased] section as CommonMark (and GitHub) reads it
    tokens: list[Token]
    lines: list[str]  # each with its end: "\n", "\r\n" or a lone "\r", as CommonMark ends lines
    end: int  # the line after its last block, a closing rule (`---`) less
    headings: list[tuple[int, str]]  # (line, "### Fixed") of each heading in it, its own first
    items: dict[int, str]  # the lines of each item of a list at its top, by its first line, trailing white space less
    links: list[tuple[str, str, str]]  # its link reference definitions (kept out of its tokens): label, URL, title


def _unreleased(text: str, name: str) -> _Unreleased:
    tokens, lines, heads, env, no_html_above = _read(text, name, "or pin another commit")
    if len(ours := [at for at, tag, title in heads if tag == "h2" and "unreleased" in title.lower()]) != 1:  # or guess
        raise SeriesError(f"{name} shows {len(ours)} second-level headings naming [unreleased], not "
                          "one: pin a commit with one for the series' entries")  # fmt: skip
    end = next((at for at, tag, _ in heads if at > ours[0] and tag in ("h1", "h2")), len(lines))
    blocks = [(t.type, t.map[0]) for t in tokens if t.map and not t.level and ours[0] < t.map[0] < end]
    end = next((at for k, (_, at) in enumerate(blocks) if {kind for kind, _ in blocks[k:]} == {"hr"}), end)  # rules
    no_html_above(end)
    items = {at: item for at, item in _items(tokens, lines).items() if ours[0] < at < end}
    headings = [(at, f"{'#' * int(tag[1])} {title}") for at, tag, title in heads if ours[0] <= at < end]
    links = [(label, link["href"], link["title"]) for label, link in env.get("references", {}).items()]
    return _Unreleased(tokens, lines, end, headings, items, links)


def _read(text: str, name: str, fix: str) -> tuple[list[Token], list[str], list[Any], dict[str, Any], _Check]:
    """``text`` as GitHub reads it: tokens, lines, (line, h1-h6, shown text) per top heading, links, an HTML check."""
    tokens, lines = _MD.parse(text.removeprefix("\ufeff"), env := dict[str, Any]()), _LINES.findall(text)  # BOM kept

    def block(first: int, end: int, tag: str) -> tuple[int, int, str]:  # its lines, less blank ones at its end
        last = first + len(_LINES.findall("".join(lines[first:end]).rstrip(" \t\r\n")))
        return (last if tag == "table" else first), last, tag  # cmark-gfm starts one under text on the text's line

    ours = sorted(block(t.map[0], t.map[1], t.tag.replace("code", "pre")) for t in tokens
                  if t.map and re.fullmatch(f"{_BLOCK}|code", t.tag))  # fmt: skip
    html = _GITHUB(text)  # GitHub's own renderer, each block's lines
    github = sorted(block(int(a) - 1, int(b), tag) for tag, a, b in _SOURCEPOS.findall(html))
    shown = {int(a) - 1: " ".join(unescape(re.sub("<[^>]*>", "", s)).split()) for a, s in _HEADING_HTML.findall(html)}
    heads = [(t.map[0], t.tag, shown.get(t.map[0], "")) for t in tokens
             if t.type == "heading_open" and t.map and not t.level]  # fmt: skip
    odd = [min(x, y)[0] for x, y in zip_longest(ours, github, fillvalue=block(len(lines), 0, "")) if x != y]
    odd += [at for at, _, title in heads if not title]
    prose = {t.map[0]: i.content for t, i in pairwise(tokens) if t.type == "paragraph_open" and t.map}  # tight too
    odd += [n for n, s in prose.items() if not _GITHUB(s).startswith(f'<p data-sourcepos="1:1-{s.count(chr(10)) + 1}:')]
    odd += [int(a) - 1 for a in re.findall(r'<p data-sourcepos="([1-9]\d*):', html) if int(a) - 1 not in prose]
    if odd:
        raise SeriesError(f"{name} shows on GitHub what forward cannot read at line {min(odd) + 1} (a heading with no "
                          f"text, or blocks CommonMark 0.31 and cmark-gfm read apart): write it as Markdown both read "
                          f"alike {fix}")  # fmt: skip

    raw, held, last = list[int](), list[int](), 0  # HTML GitHub shows, at its innermost block's line; at top level or
    for close, at, end, void, comment in _TAGS.findall(html):  # with no line (footnotes, text cmark-gfm cut off a
        here = held[-1] if held else next((n for n in range(last, len(lines)) if lines[n].strip()), last)  # table): the
        raw += [here] * bool(comment)  # first text after the blocks, a lower bound
        last = max(last, int(end or 0))
        held = held if comment or void else held[:-1] if close else [*held, int(at) - 1 if int(at or 0) else here]
    raw += [t.map[0] for t in tokens if t.map for c in [t, *(t.children or [])] if "html" in c.type]  # or markdown-it

    def no_html_above(end: int) -> None:  # an HTML parser carries a tag onward (`<s>`, `<select>`, a comment), not back
        if above := [at for at in raw if at < end]:
            raise SeriesError(f"{name} holds HTML at line {min(above) + 1}, above the end of what forward reads (line "
                              f"{end + 1}), which HTML parsers carry onward: write it as Markdown {fix}")  # fmt: skip

    return tokens, lines, heads, env, no_html_above


def _items(tokens: list[Token], lines: list[str]) -> dict[int, str]:  # top-level items' lines, white space as blank
    spans = [t.map for t in tokens if t.type == "list_item_open" and t.level == 1 and t.map]
    return {a: re.sub(r"(?m)^[ \t]+$", "", re.sub(r"\r\n?", "\n", "".join(lines[a:b]))).rstrip() for a, b in spans}


def _shape(tokens: list[Token], skip: range) -> list[tuple[Any, ...]]:  # what reads, less the blocks opened in skip
    return [(t.type, t.tag, t.level, t.content, t.markup, t.info) for t in tokens if t.map and t.map[0] not in skip]


def add_entry(repo: Path, changelog: str, heading: str, entry: str) -> bool:
    """Add ``entry`` to ``heading``'s list in [unreleased], if it then reads as one more item; False if it is there."""
    text = (repo / changelog).read_bytes().decode() if (repo / changelog).is_file() else ""
    old, wanted = _unreleased(text, name := f"the target's {changelog}"), re.sub(r"\r\n?", "\n", entry).rstrip()
    if any(item[:1] in "-*+" and item[1:] == wanted[1:] for item in old.items.values()):  # CommonMark's line ends
        return False
    mine = next((at for at, title in old.headings if title == heading), None)
    later = _HEADINGS[_HEADINGS.index(heading) + 1 :] if heading in _HEADINGS else ()  # Keep a Changelog's order
    ends = [at for at, title in old.headings if (title in later if mine is None else at > mine)]  # where its list ends
    first, block = (old.headings[0][0], [heading, "", entry]) if mine is None else (mine, [entry])  # new heading?
    texts = [i for i in range(first + 1, min(ends, default=old.end)) if old.lines[i].strip(" \t\r\n")]
    empty = mine is not None and [old.items.get(i, "").strip(" \t") for i in texts] in (["-"], ["*"], ["+"])  # empty
    at, added = texts[0] if empty else (texts[-1] if texts else first) + 1, "\n".join(["", *block][empty:]).split("\n")
    eol = (re.findall(r"\r\n?|\n", "".join(old.lines[:at])) or ["\n"])[-1]  # the last before it: its CR meets no LF
    lines = [line if line.endswith(("\n", "\r")) else f"{line}{eol}" for line in old.lines]  # the last one too
    lines[at : at + empty] = [f"{line}{eol}" for line in added]
    written = "".join(lines) if text.endswith(("\n", "\r")) else "".join(lines).removesuffix(eol)
    new = _unreleased(written, f"{name} with {chr(10).join(block)[:60]!r} added")  # read back: the heading too
    span = len(new.lines) - len(old.lines) + empty  # added, in CommonMark's lines
    bullet = at + span - wanted.count("\n") - 1
    under = [h for line, h in new.headings if line < bullet][-1:] == [heading]
    same = _shape(new.tokens, range(at, at + span)) == _shape(old.tokens, range(at, at + empty))  # pre-order, levels
    if new.items.get(bullet) != wanted or not under or not same or new.links != old.links:
        raise SeriesError(f"forward cannot add {entry.partition(chr(10))[0][:40]!r} to [unreleased] of the target's "
                          f"{changelog} so that CommonMark reads it as one more item under {heading!r} and the rest "
                          f"as before (line {at + 1}): pin a commit whose CHANGELOG takes it")  # fmt: skip
    (repo / changelog).write_bytes(written.encode())
    return True
