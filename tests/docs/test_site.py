"""The docs site builds offline with ``mkdocs build --strict`` and loads nothing from the web."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: a page's own assets: scripts, stylesheets, fonts and images (links to other sites are fine)
ASSET = re.compile(r'<(?:script|img)[^>]*\ssrc="(https?:)?//|<link[^>]*\shref="(https?:)?//')


def test_the_site_builds_strictly_and_offline(tmp_path: Path) -> None:
    site = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 15
    assert (site / "api" / "index.html").read_text().count("make_vec") > 0
    external = [p.relative_to(site) for p in pages if ASSET.search(p.read_text())]
    assert external == []
