"""Every relative link of the repository's Markdown resolves, on GitHub and on the docs site.

Over every Markdown file outside ``.venv`` and hidden folders (the README, docs/, bench/ with
RESULTS.md and its pages under bench/results/pages/, the packages' READMEs):

* a relative link ``[text](path)`` or image ``![alt](path)`` names a file or folder that exists;
* a link with an anchor into a Markdown file (``path.md#anchor``, or ``#anchor`` on the same
  page) names one of the anchors GitHub gives that file's headings (:func:`github_anchors`:
  lower case, every character but letters, digits, spaces, hyphens and underscores dropped, each
  space a hyphen, repeats suffixed ``-1``, ``-2``);
* a link from a page of the docs site (the README, docs/, bench/RESULTS.md and its pages, which
  ``docs/hooks/repo_files.py`` publishes) names a file the site has, and its anchor is the same
  one the site gives the heading (``markdown``'s ``toc`` slug), so it works in both places.

``http(s):``, ``mailto:`` and other absolute links are skipped. The pages also pass the checks
tests/docs/references.py runs over RESULTS.md (paths, section pointers, command lines). The
tests at the end feed the checks broken text and show each one failing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.references import all_problems, command_problems, path_problems, pointer_problems

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
SKIP_DIRS = {".venv", "venv", "node_modules", "site", "__pycache__"}

#: ``[text](target "title")`` and ``![alt](target)``; the target may be wrapped in ``<>``
LINK = re.compile(r"\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: ``[label]: target`` reference definitions
REFERENCE = re.compile(r"^ {0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+[^>]*?(?:name|id)=[\"']([^\"']+)[\"']", re.I)


def markdown_files(root: Path = ROOT) -> list[Path]:
    """Every ``.md`` file under ``root``, skipping hidden folders and virtual environments."""
    found = []
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        found += [Path(top) / f for f in files if f.endswith(".md")]
    return sorted(found)


def _blank(m: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", m.group(0))


def _blank_code(text: str) -> str:
    """``text`` with fenced blocks, indented code lines and inline code spans blanked (offsets
    kept): a link or heading shown as code is neither."""
    text = FENCE.sub(_blank, text)
    text = re.sub(r"(?:^|(?<=\n\n))(?:(?: {4}|\t)[^\n]*(?:\n|$))+", _blank, text)
    return re.sub(r"(`+)[^`\n]+?\1", _blank, text)


def heading_titles(text: str) -> list[str]:
    """The text of a Markdown page's ATX headings, in order (code skipped)."""
    return [m.group(2) for m in HEADING.finditer(FENCE.sub(_blank, text))]


def _plain(title: str) -> str:
    """A heading as rendered text: links to their text, HTML tags dropped."""
    title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)
    return re.sub(r"<[^>]+>", "", title)


def github_slug(title: str) -> str:
    """GitHub's anchor for one heading, before repeats are numbered.

    >>> github_slug("R2 — a fitted model"), github_slug("Demo: `make demo`'s run time")
    ('r2--a-fitted-model', 'demo-make-demos-run-time')
    >>> github_slug("D5 protocol (partly run): the algorithm-by-system 2×2")
    'd5-protocol-partly-run-the-algorithm-by-system-22'
    """
    text = _plain(title).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def github_anchors(text: str) -> list[str]:
    """The anchors GitHub gives a page: one per heading, a repeat suffixed ``-1``, ``-2``...;
    and any ``<a name=...>`` / ``id=...``.

    >>> github_anchors("# A\\n## A\\n## A\\n```\\n# not a heading\\n```\\n")
    ['a', 'a-1', 'a-2']
    """
    seen: dict[str, int] = {}
    anchors = []
    for title in heading_titles(text):
        base = slug = github_slug(title)
        while slug in seen:
            seen[base] += 1
            slug = f"{base}-{seen[base]}"
        seen[slug] = 0
        anchors.append(slug)
    return anchors + HTML_ANCHOR.findall(text)


def site_anchors(text: str) -> list[str]:
    """The anchors the docs site gives a page (``markdown``'s ``toc`` extension, as mkdocs
    builds it): its slug, a repeat suffixed ``_1``, ``_2``..."""
    from markdown.extensions.toc import slugify, unique

    ids: set[str] = set()
    out = []
    for title in heading_titles(text):
        out.append(unique(slugify(re.sub(r"[`*]", "", _plain(title)), "-"), ids))
    return out + HTML_ANCHOR.findall(text)


def links(text: str) -> Iterator[tuple[int, str]]:
    """(line, target) of every relative link and image of a Markdown text."""
    body = _blank_code(text)
    found = [(m.start(), m.group(1)) for m in LINK.finditer(body)]
    found += [(m.start(), m.group(1)) for m in REFERENCE.finditer(body)]
    for pos, target in sorted(found):
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto:, and any other scheme
        yield text.count("\n", 0, pos) + 1, target


def site_sources(root: Path = ROOT) -> set[Path]:
    """The files the docs site is built from: docs/ and what ``docs/hooks/repo_files.py`` adds
    (the README, bench/RESULTS.md, its pages and the plots under bench/results/)."""
    bench = root / "bench"
    files = {p for p in (root / "docs").rglob("*") if p.is_file() and "hooks" not in p.parts}
    files |= {root / "README.md", bench / "RESULTS.md"}
    files |= set((bench / "results" / "pages").glob("*.md"))
    files |= set((bench / "results").rglob("*.png"))
    return {p.resolve() for p in files}


def link_problems(page: Path, text: str | None = None, root: Path = ROOT) -> list[str]:
    """The relative links of ``page`` that do not resolve on GitHub or, for a page of the docs
    site, on the site; one ``"<file>:<line>: <target>: <why>"`` each."""
    text = page.read_text(encoding="utf-8") if text is None else text
    site = site_sources(root)
    on_site = page.resolve() in site
    name = page.relative_to(root).as_posix() if page.is_relative_to(root) else str(page)
    problems = []
    for line, target in links(text):
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page.resolve()
        where = f"{name}:{line}: {target}"
        if path_part and not dest.exists():
            problems.append(f"{where}: no such file")
            continue
        if on_site and path_part and dest.is_file() and dest not in site:
            problems.append(f"{where}: not on the docs site (docs/hooks/repo_files.py)")
        if not anchor or dest.suffix != ".md" or not dest.is_file():
            continue
        dest_text = text if not path_part else dest.read_text(encoding="utf-8")
        if anchor not in github_anchors(dest_text):
            problems.append(f"{where}: no heading with that anchor on GitHub")
        elif on_site and anchor not in site_anchors(dest_text):
            problems.append(f"{where}: the docs site gives that heading another anchor")
    return problems


def test_every_relative_link_resolves_on_github_and_on_the_site() -> None:
    pytest.importorskip("markdown")
    pages = markdown_files()
    names = {p.relative_to(ROOT).as_posix() for p in pages}
    assert {"README.md", "docs/training.md", "bench/RESULTS.md"} <= names
    assert "bench/results/pages/distrl.md" in names
    assert [p for p in pages if ".venv" in p.parts] == []
    assert [problem for page in pages for problem in link_problems(page)] == []


def test_results_is_a_short_table_whose_rows_link_their_pages() -> None:
    text = (BENCH / "RESULTS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    glance = ("\n" + text).split("\n## At a glance\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in glance.splitlines() if line.startswith("|")][2:]
    assert len(rows) >= 20
    for row in rows:
        assert re.search(r"\]\(results/pages/[\w-]+\.md(#[\w-]+)?\)", row), row
    listed = set(re.findall(r"\]\((results/pages/[\w-]+\.md)\)", text))
    pages = {p.relative_to(BENCH).as_posix() for p in (BENCH / "results" / "pages").glob("*.md")}
    assert pages and listed == pages  # every page is listed, every listed page exists


def test_the_pages_pass_the_docs_checks_results_md_passed() -> None:
    """The checks tests/docs runs over RESULTS.md (repository paths, section pointers, command
    lines) also cover the text that moved from it into its pages."""
    pages = sorted((BENCH / "results" / "pages").glob("*.md"))
    assert pages
    for check in (path_problems, pointer_problems, command_problems):
        assert all_problems(check, pages) == []


# ------------------------------------------------------------------ the checks, failing


def test_a_broken_link_or_anchor_fails(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "bench" / "results" / "pages").mkdir(parents=True)
    (tmp_path / "README.md").write_text("# Readme\n")
    (tmp_path / "bench" / "RESULTS.md").write_text("# Results\n\n## R2: a progress model\n")
    (tmp_path / "bench" / "plans").mkdir()
    (tmp_path / "bench" / "plans" / "p.md").write_text("# Plan\n")
    (tmp_path / "data.json").write_text("{}")
    page = tmp_path / "docs" / "x.md"
    text = (
        "# Top\n\n## Same\n\n## Same\n\n"
        "[a](../bench/RESULTS.md#r2-a-progress-model-fitted-here)\n"  # GitHub has no such anchor
        "[b](../bench/RESULTS.md#r2-a-progress-model)\n"  # fine
        "[c](missing.md) ![d](../img/none.png)\n"  # no such files
        "[e](#same-1)\n"  # GitHub's second "Same"; the site calls it same_1
        "[f](#top) [g](https://example.com/x.md#y) [h](mailto:a@b.c)\n"  # fine / skipped
        "[i](../bench/plans/p.md) [j](../data.json)\n"  # exist, but the site has neither
        "`[k](code.md)`\n\n    [l](indented.md)\n"  # code, not links
    )
    page.write_text(text)
    problems = link_problems(page, text, root=tmp_path)
    lines = [int(p.split(": ", 1)[0].rsplit(":", 1)[1]) for p in problems]
    assert lines == [7, 9, 9, 10, 12, 12]
    assert "no heading with that anchor on GitHub" in problems[0]
    assert "no such file" in problems[1] and "no such file" in problems[2]
    assert "another anchor" in problems[3]
    assert all("not on the docs site" in p for p in problems[4:])
    outside = tmp_path / "notes.md"  # not a page of the site: GitHub's rules only
    assert link_problems(outside, "[e](docs/x.md#same-1) [i](bench/plans/p.md)", tmp_path) == []
