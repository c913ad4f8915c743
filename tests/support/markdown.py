"""The repository's Markdown as a browser shows it: its pages, their headings' anchors, their links."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    """The README and every page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def prose(text: str) -> str:
    """The text with its fenced code blocks left out: a `#` or `](` inside one is code, not Markdown."""
    return _FENCE.sub("", text)


def anchor(heading: str) -> str:
    """The anchor GitHub and GitLab give a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on the page; a repeated heading gets -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", prose(page.read_text()), re.M):
        base = anchor(heading)
        seen[base] = seen.get(base, -1) + 1
    return {f"{a}-{n}" if n else a for a, count in seen.items() for n in range(count + 1)}


def relative_links(page: Path) -> list[str]:
    """The page's links to other files of the repository (or its own anchors): no URL scheme."""
    return [t for t in _LINK.findall(prose(page.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]
