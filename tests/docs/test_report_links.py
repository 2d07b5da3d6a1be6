"""Every image a Markdown page of the project shows exists: README.md and docs/**/*.md.

The calibration reports under docs/img are written by bench/trust_report.py with a file prefix;
a report whose plots were renamed after writing, or a page naming a plot that was never drawn,
shows a broken image. Links to other sites are not checked (nothing is fetched).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: ![alt](target "optional title") and <img src="target">
IMAGE = re.compile(
    r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<img\s[^>]*src=\"([^\"]+)\""
)


def image_links(text: str) -> list[str]:
    """The targets of the image links in a Markdown text (code blocks skipped).

    >>> image_links('![a](img/x.png) `![b](y.png)` <img src="z.png">')
    ['img/x.png', 'z.png']
    """
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [m.group(1) or m.group(2) for m in IMAGE.finditer(text)]


def test_the_pages_are_found() -> None:
    assert PAGES[0].is_file() and any(p.name == "calib_synthetic_report.md" for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_image_link_points_to_a_file(page: Path) -> None:
    missing = [
        link
        for link in image_links(page.read_text(encoding="utf-8"))
        if not link.startswith(("http://", "https://", "data:"))
        and not (page.parent / link.split("#")[0]).is_file()
    ]
    assert not missing, f"{page.relative_to(ROOT)} shows missing images: {missing}"
