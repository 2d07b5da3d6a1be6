"""mkdocs hook: pages that live elsewhere in the repository.

* ``index.md`` is the README, its links made relative to the site;
* ``benchmarks/RESULTS.md`` (with its plots) is ``bench/RESULTS.md``, which lives beside the
  benchmarks that write it; pages link to it as ``../bench/...`` (which works in the
  repository) and the site gets ``benchmarks/...``.

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
    for path in [bench / "RESULTS.md", *sorted((bench / "results").glob("*.png"))]:
        rel = path.relative_to(bench).as_posix()
        files.append(File.generated(config, f"benchmarks/{rel}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return markdown.replace("](../bench/", "](benchmarks/")
