"""Every relative link of README.md and docs/**/*.md resolves (issue 34 item 8).

A link ``[text](target)`` or image ``![alt](target)`` outside code is checked when its
target is relative (no scheme): the file (or folder) must exist, relative to the
linking file, and a ``#fragment`` must name a heading of the target Markdown file (its
GitHub anchor: lower-cased, punctuation dropped, spaces to hyphens, ``-1``, ``-2``
for repeats) or an ``<a id=...>`` / ``<a name=...>`` in it. The checker is tested on a
broken page too, so it cannot pass by finding nothing. Also pinned here: the README
stays under 250 lines and its test command is the one ``.ci/run`` runs.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_files() -> list[Path]:
    """README.md and every Markdown file under docs/, sorted."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (links there are code)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text: ``"Links (issue 15)"`` -> ``"links-issue-15"``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link's text only
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor of the Markdown file at ``path``: headings (repeats numbered) and
    HTML ``id``/``name`` anchors."""
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    out = set(HTML_ANCHOR.findall(text))
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def broken_links(path: Path) -> list[str]:
    """``"<file>: <target> (<why>)"`` for each relative link of ``path`` that does not resolve."""
    problems = []
    for target in LINK.findall(prose(path.read_text(encoding="utf-8"))):
        if not target or SCHEME.match(target):
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{path.name}: {target} (no such file)")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{path.name}: {target} (no such anchor in {dest.name})")
    return problems


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_checker_finds_broken_links(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## A section (issue 1)\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## Twice\n\n## Twice\n\n"
        "[ok](other.md#a-section-issue-1) [ok](#twice-1) [ok](other.md) [web](https://x.example/y)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) ![img](pics/none.png) [self](#nowhere)\n"
        "`[in code](missing-too.md)`\n\n```\n[in a fence](missing-three.md)\n```\n",
        encoding="utf-8")
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nope (no such anchor in other.md)",
        "page.md: pics/none.png (no such file)",
        "page.md: #nowhere (no such anchor in page.md)",
    ]


def test_slug_follows_github() -> None:
    assert slug("Embedder migration: `reembed` (issue 19)") == "embedder-migration-reembed-issue-19"
    assert slug("N = 100,000 with a real embedder (run 4)") == "n--100000-with-a-real-embedder-run-4"
    assert slug("`known_at` cost (issue 31)") == "known_at-cost-issue-31"


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250, len(lines)


def test_readme_test_command_is_the_one_ci_runs() -> None:
    """``.ci/run`` ends with "the README's test command": the same line, character for character."""
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.strip()]
    command = ci[-1].strip()
    assert command.endswith("-m pytest"), command
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert command in [line.strip() for line in readme]


def test_every_doc_page_is_linked_from_the_readme() -> None:
    """A page under docs/ that the README does not link is a page a newcomer never finds."""
    readme = prose((ROOT / "README.md").read_text(encoding="utf-8"))
    linked = {t.partition("#")[0] for t in LINK.findall(readme)}
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), "add a line for each to the README's '## Docs' list"
