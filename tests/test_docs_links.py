"""Every link in README.md and docs/*.md resolves: files and headings in this repository, well-formed https links.

No network: external links are only checked for their form. Links inside code (fenced blocks, `spans`) are not links.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from patchseries.paths import PROJECT_ROOT

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
INLINE = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]*)(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(?P<target>\S+)", re.MULTILINE)
AUTOLINK = re.compile(r"<(?P<target>https?://[^>\s]+)>")
# where a checkout on a machine lives; a page must name paths relative to the repository
README_MAX_LINES = 200  # a newcomer reads it in two minutes; the rest is in docs/
MACHINE_PATH = re.compile(r"(?<![\w.~-])(/(?:work|tmp|home|Users|root|mnt|opt|var|private)/|[A-Za-z]:\\)")


def _prose(text: str) -> str:
    """The text without fenced code blocks, inline code and HTML comments (kept as blank lines, for line numbers)."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group().count("\n"), text, flags=re.DOTALL)
    text = re.sub(r"^(```|~~~).*?^\1[ \t]*$", lambda m: "\n" * m.group().count("\n"), text, flags=re.DOTALL | re.M)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text)


def links(page: Path) -> list[str]:
    text = _prose(page.read_text())
    found = [m["target"] for m in INLINE.finditer(text)]
    return found + [m["target"] for m in REFERENCE.finditer(text)] + [m["target"] for m in AUTOLINK.finditer(text)]


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: the text without markup, lowercased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in re.sub(r"^(```|~~~).*?^\1[ \t]*$", "", page.read_text(), flags=re.DOTALL | re.M).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        anchor = github_anchor(heading.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def problem(page: Path, target: str) -> str | None:
    """Why ``target``, a link on ``page``, does not resolve; None if it does."""
    if not target:
        return "an empty link"
    parts = urlsplit(target)
    if parts.scheme in ("http", "https"):
        if parts.scheme != "https":
            return "not https"
        if not re.fullmatch(r"[a-z0-9-]+(\.[a-z0-9-]+)+", parts.netloc) or " " in target:
            return "not a well-formed https URL"
        return None
    if parts.scheme or parts.netloc:
        return f"a {parts.scheme or 'network'} link (only https and relative links are allowed)"
    if target.startswith("/"):
        return "an absolute path: link relative to the page"
    path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    if not path.is_relative_to(PROJECT_ROOT):
        return "outside the repository"
    if not path.exists():
        return f"{path.relative_to(PROJECT_ROOT)} does not exist"
    if parts.fragment:
        if path.suffix != ".md":
            return f"an anchor into {path.name}, which is not a Markdown page"
        if parts.fragment not in anchors(path):
            return f"{path.relative_to(PROJECT_ROOT)} has no heading with the anchor #{parts.fragment}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_link_resolves(page):
    broken = [f"{target}: {why}" for target in links(page) if (why := problem(page, target))]
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_no_absolute_machine_paths(page):
    found = [
        f"line {number}: {line.strip()}"
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert found == []


def test_the_readme_is_a_front_page():
    assert len((PROJECT_ROOT / "README.md").read_text().splitlines()) <= README_MAX_LINES


def test_the_docs_pages_are_linked_from_the_readme():
    linked = {(PROJECT_ROOT / target.split("#")[0]).resolve() for target in links(PROJECT_ROOT / "README.md")}
    assert [page.name for page in PAGES[1:] if page not in linked] == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Two commands", "two-commands"),
        ("`with self.toggle_optimizer(...)` (patch 0009)", "with-selftoggle_optimizer-patch-0009"),
        ("Safety rules: your work in the tree is never lost", "safety-rules-your-work-in-the-tree-is-never-lost"),
        ("The forward series (`patches/master/`)", "the-forward-series-patchesmaster"),
        ("What v3's eager update bought, against series v1 (issue #10)",
         "what-v3s-eager-update-bought-against-series-v1-issue-10"),
    ],
)  # fmt: skip
def test_anchors_are_githubs(heading, anchor):
    assert github_anchor(heading) == anchor


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("docs/missing.md", "docs/missing.md does not exist"),
        ("README.md#no-such-heading", "README.md has no heading with the anchor #no-such-heading"),
        ("/srv/checkout/README.md", "an absolute path: link relative to the page"),
        ("file:///tmp/x", "a file link (only https and relative links are allowed)"),
        ("http://example.org", "not https"),
        ("https://exa mple", "not a well-formed https URL"),
        ("../../etc/passwd", "outside the repository"),
        ("LICENSE#x", "an anchor into LICENSE, which is not a Markdown page"),
    ],
)
def test_broken_links_are_named(target, why):
    assert problem(PROJECT_ROOT / "README.md", target) == why


def test_links_in_code_are_not_links(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](one.md) `[b](two.md)`\n```\n[c](three.md)\n```\n<!-- [d](four.md) -->\n<https://x.org/y>\n")

    assert links(page) == ["one.md", "https://x.org/y"]
