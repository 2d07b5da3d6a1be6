"""The project cites its own docs: no references to documents a reader does not have."""

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


def test_cited_docs_exist() -> None:
    cited = set()
    for f in _files():
        cited |= set(re.findall(r"docs/([A-Z_]+\.md)", f.read_text(errors="replace")))
    assert {"PROTOCOLS.md", "PROGRESS.md", "PRESETS.md"} <= cited
    missing = sorted(c for c in cited if not (ROOT / "docs" / c).is_file())
    assert missing == []
