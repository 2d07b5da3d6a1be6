"""Plans come before their records (bench/plans/README.md), and links into the results resolve.

* Every plan ``bench/plans/<name>.md`` names its record dir on a line ``Record dir: <path>``.
  The commit that first added the plan must be a strict ancestor of every commit that added a
  file under that dir (``git merge-base --is-ancestor``, and not the same commit). A plan whose
  record dir holds no committed file passes: nothing ran yet.
* Every row of the headline tables (RESULTS.md's "At a glance", the "Headlines" page under
  bench/results/pages/) that names a plan names one that exists.
* Every link with an anchor into RESULTS.md or one of its pages (from the README, docs/,
  RESULTS.md and the pages) names a heading whose anchor is the same on GitHub and on the docs
  site (``markdown``'s ``toc`` slug).

The ordering check runs on this repository's history; it is skipped only without ``git`` or in
a shallow clone (whose history is cut). A tiny repository made here shows the check failing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLANS_DIR = ROOT / "bench" / "plans"
RESULTS = ROOT / "bench" / "RESULTS.md"
RESULT_PAGES = ROOT / "bench" / "results" / "pages"
RECORD_DIR = re.compile(r"^Record dir: *(\S+?)/? *$", re.M)
PLAN_PATH = re.compile(r"bench/plans/[\w.-]+\.md")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60
    )


def plans(root: Path = ROOT) -> list[Path]:
    """The plan files (the README is not a plan)."""
    return sorted(p for p in (root / "bench" / "plans").glob("*.md") if p.name != "README.md")


def record_dir(plan_text: str) -> str:
    """The record dir a plan declares, relative to the repository root.

    >>> record_dir("# Plan\\n\\nRecord dir: bench/results/x/runs/\\n")
    'bench/results/x/runs'
    """
    found = RECORD_DIR.findall(plan_text)
    if len(found) != 1:
        raise ValueError(f"a plan names exactly one 'Record dir:' line, found {len(found)}")
    return found[0]


def adding_commits(repo: Path, path: str) -> list[str]:
    """Commits that added a file at or under ``path``, newest first."""
    out = _git(repo, "log", "--diff-filter=A", "--format=%H", "--", path)
    out.check_returncode()
    return out.stdout.split()


def ordering_problems(repo: Path, plan: str, records: str) -> list[str]:
    """Why ``plan`` (a path in ``repo``) does not strictly precede every record under
    ``records``; empty when it does or when no record is committed."""
    recorded = adding_commits(repo, records)
    if not recorded:
        return []
    added = adding_commits(repo, plan)
    if not added:
        return [f"{plan}: records under {records} are committed, the plan is not"]
    first = added[-1]
    problems = []
    for commit in recorded:
        if commit == first:
            problems.append(f"{plan}: committed together with records under {records} ({commit})")
        elif _git(repo, "merge-base", "--is-ancestor", first, commit).returncode != 0:
            problems.append(f"{plan}: committed after a record under {records} ({commit})")
    return problems


def _history_usable(repo: Path) -> str | None:
    """Why the history cannot be checked, or None."""
    if shutil.which("git") is None:
        return "git is not installed"
    inside = _git(repo, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return "not a git checkout"
    if _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        return "shallow clone: the history that orders plans and records is cut"
    return None


def test_every_plan_names_one_record_dir_under_bench_results() -> None:
    found = plans()
    assert found, "bench/plans holds no plan"
    for plan in found:
        path = record_dir(plan.read_text(encoding="utf-8"))
        assert path.startswith("bench/results/"), f"{plan.name}: {path}"


def test_every_plan_precedes_its_records() -> None:
    reason = _history_usable(ROOT)
    if reason:
        pytest.skip(reason)
    problems = []
    for plan in plans():
        records = record_dir(plan.read_text(encoding="utf-8"))
        problems += ordering_problems(ROOT, plan.relative_to(ROOT).as_posix(), records)
    assert problems == []


def headline_rows(text: str, heading: str = "Headlines") -> list[str]:
    """The rows of the first table under the heading ``# <heading>`` or ``## <heading>``, up to
    the next heading of level 1 or 2.

    >>> headline_rows("## Headlines\\n\\n| a | b |\\n|---|---|\\n| R2 | x |\\n\\n## P1\\n| no |")
    ['| R2 | x |']
    >>> headline_rows("# Headlines\\n\\n| a |\\n|---|\\n| R2 |\\n")
    ['| R2 |']
    """
    part = re.split(rf"^##? {re.escape(heading)}\n", text, maxsplit=1, flags=re.M)[1]
    part = re.split(r"^##? ", part, maxsplit=1, flags=re.M)[0]
    rows = [line for line in part.splitlines() if line.startswith("|")]
    return rows[2:]


def test_headline_rows_that_name_a_plan_name_an_existing_one() -> None:
    text = RESULTS.read_text(encoding="utf-8")
    headlines = (RESULT_PAGES / "headlines.md").read_text(encoding="utf-8")
    rows = headline_rows(text, "At a glance") + headline_rows(headlines, "Headlines")
    assert rows and any(PLAN_PATH.search(row) for row in rows)
    missing = [p for row in rows for p in PLAN_PATH.findall(row) if not (ROOT / p).is_file()]
    assert missing == []


# ---------------------------------------------------------------- links into the results


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen.

    >>> github_anchor("R2 — a progress model")
    'r2--a-progress-model'
    """
    text = re.sub(r"`([^`]*)`", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def site_anchor(heading: str) -> str:
    """The docs site's anchor for a heading (``markdown``'s ``toc`` slug)."""
    from markdown.extensions.toc import slugify

    return slugify(re.sub(r"`([^`]*)`", r"\1", heading), "-")


def headings(text: str) -> list[str]:
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.M | re.S)
    return re.findall(r"^#{1,6} +(.+?) *#* *$", text, re.M)


def test_every_link_into_results_has_one_anchor_on_github_and_on_the_site() -> None:
    pytest.importorskip("markdown")
    results = [RESULTS, *sorted(RESULT_PAGES.glob("*.md"))]
    both = {}
    for page in results:
        heads = headings(page.read_text(encoding="utf-8"))
        both[page] = [github_anchor(h) for h in heads if github_anchor(h) == site_anchor(h)]
    pages = [ROOT / "README.md", *results, *sorted((ROOT / "docs").rglob("*.md"))]
    link = re.compile(r"\]\(([\w./-]*)#([^)\s]+)\)")
    problems, checked = [], 0
    for page in pages:
        for target, anchor in link.findall(page.read_text(encoding="utf-8")):
            dest = (page.parent / target).resolve() if target else page
            if dest in both:
                checked += 1
                if both[dest].count(anchor) != 1:
                    problems.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert checked and problems == []


# ---------------------------------------------------------------- the check can fail


def _repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q").check_returncode()
    return repo


def _commit(repo: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}  # fmt: skip
    for args in (["add", *files], ["commit", "-q", "--no-gpg-sign", "-m", message]):
        subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, timeout=60)


PLAN = "# Plan\n\nRecord dir: bench/results/x/runs/\n"


def test_the_ordering_check_reports_a_plan_committed_after_its_record(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _commit(repo, {"bench/results/x/runs/a.json": "{}"}, "a record")
    _commit(repo, {"bench/plans/x.md": PLAN}, "the plan, too late")
    problems = ordering_problems(repo, "bench/plans/x.md", record_dir(PLAN))
    assert len(problems) == 1 and "committed after a record" in problems[0]


def test_the_ordering_check_reports_a_plan_committed_with_its_record(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _commit(repo, {"bench/plans/x.md": PLAN, "bench/results/x/runs/a.json": "{}"}, "both")
    problems = ordering_problems(repo, "bench/plans/x.md", "bench/results/x/runs")
    assert len(problems) == 1 and "together" in problems[0]


def test_the_ordering_check_passes_a_plan_before_its_records(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _commit(repo, {"bench/plans/x.md": PLAN}, "the plan")
    assert ordering_problems(repo, "bench/plans/x.md", "bench/results/x/runs") == []
    _commit(repo, {"bench/results/x/runs/a.json": "{}"}, "a record")
    _commit(repo, {"bench/results/x/runs/b.json": "{}"}, "another")
    assert ordering_problems(repo, "bench/plans/x.md", "bench/results/x/runs") == []
    _commit(repo, {"bench/results/y/runs/c.json": "{}"}, "a record without a plan")
    assert ordering_problems(repo, "bench/plans/y.md", "bench/results/y/runs") == [
        "bench/plans/y.md: records under bench/results/y/runs are committed, the plan is not"
    ]
