"""The project cites its own docs: no references to documents a reader does not have.

That every cited page, heading, path and command exists is tests/docs/test_references.py.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("evolve_envs", "tests", "bench", "docs", "scripts")
FORBIDDEN = re.compile(r"DESIGN ?(§|section)|DESIGN\.md|seed 000")


def _files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in SOURCES:
        for ext in ("*.py", "*.md", "*.yaml"):
            files += (ROOT / top).rglob(ext) if (ROOT / top).is_dir() else []
    return [f for f in files if f.resolve() != Path(__file__).resolve()]


def test_no_citations_of_missing_documents() -> None:
    hits = [
        f"{f.relative_to(ROOT)}:{n}"
        for f in _files()
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert hits == []
