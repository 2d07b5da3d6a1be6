"""mkdocs hook: pages that live elsewhere in the repository.

* ``index.md`` is the README, its links made relative to the site;
* ``benchmarks/RESULTS.md`` is ``bench/RESULTS.md``, the headline table, and
  ``benchmarks/results/pages/*.md`` (with the plots under ``benchmarks/results/``) are its pages
  under ``bench/results/``, which live beside the benchmarks that write them; pages link to them as
  ``../bench/...`` (which works in the repository) and the site gets ``benchmarks/...``.

Nothing is copied into ``docs/``: each text has one home.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]


def readme_as_index(text: str) -> str:
    """The README with its links pointing into the site instead of the repository."""
    return text.replace("](docs/", "](").replace("](bench/", "](benchmarks/")


def on_files(files: Files, config: Any) -> Files:
    readme = (ROOT / "README.md").read_text()
    files.append(File.generated(config, "index.md", content=readme_as_index(readme)))
    bench = ROOT / "bench"
    pages = sorted((bench / "results" / "pages").glob("*.md"))
    for path in [bench / "RESULTS.md", *pages, *sorted((bench / "results").rglob("*.png"))]:
        rel = path.relative_to(bench).as_posix()
        files.append(File.generated(config, f"benchmarks/{rel}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return markdown.replace("](../bench/", "](benchmarks/")
