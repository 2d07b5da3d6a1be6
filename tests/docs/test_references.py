"""The docs point at things that exist, and their command lines parse (tests/docs/references.py).

Over the README, the pages of docs/, bench/RESULTS.md and the package's docstrings, comments
and configs: every relative link resolves to a file and a heading, every quoted "see <section>"
pointer to a heading of the page it names, every repository path to a file, and every
``evolve-envs`` / ``evolve-reward-server`` / ``evolve-reward-launch`` command line parses with
the program's real argument parser. The tests of the checks feed them broken text and show each
one failing; the reward-model key table of the wrappers page lists every key of the schema.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.references import (
    ROOT,
    all_problems,
    command_lines,
    command_problems,
    doc_pages,
    link_problems,
    path_problems,
    pointer_problems,
    source_files,
)

PAGES = doc_pages()
SOURCES = source_files()
FAKE = ROOT / "docs" / "broken.md"


def test_the_files_are_found() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "training.md", "getting-started.md", "RESULTS.md"} <= names
    assert {"Makefile", "main.py", "reach_place.yaml", "train-rayjob.yaml"} <= {
        p.name for p in SOURCES
    }
    found = [argv for f in PAGES + SOURCES for _, argv, _ in command_lines(f)]
    assert len(found) >= 80  # the checks below see the docs' commands
    assert {a[1] for a in found if a[0] == "evolve-envs" and len(a) > 1} >= {
        "rollout", "train", "calibrate", "tasks", "evaluate", "demo",
    }  # fmt: skip


def test_every_relative_link_resolves_to_a_page_and_heading() -> None:
    assert all_problems(link_problems, PAGES) == []


def test_every_section_pointer_names_a_heading() -> None:
    assert all_problems(pointer_problems, PAGES + SOURCES) == []


def test_every_repository_path_exists() -> None:
    assert all_problems(path_problems, PAGES + SOURCES) == []


def test_every_command_line_parses_with_the_real_parser() -> None:
    files = [f for f in PAGES + SOURCES if f.name != "setup.cfg"]  # its entry points: not commands
    assert all_problems(command_problems, files) == []


# ------------------------------------------------------------------ the checks, failing


def test_a_broken_link_fails() -> None:
    text = "Read [it](training.md#no-such-heading), [that](missing.md) and [ok](training.md).\n"
    problems = link_problems(FAKE, text)
    assert len(problems) == 2
    assert "training.md#no-such-heading: no heading with that anchor" in problems[0]
    assert "missing.md: no such file" in problems[1]
    good = "[ok](training.md#held-out-evaluation-and-the-best-checkpoint) `[x](no.md)`"
    assert link_problems(FAKE, good) == []  # a real anchor passes; code is not a link


def test_a_broken_pointer_fails_in_a_page_and_in_a_docstring() -> None:
    page = 'As said (see "Exit statuses"), see "No such part" and README, "Two commands".\n'
    problems = pointer_problems(FAKE, page)
    assert len(problems) == 2 and all("No such part" in p or "Exit" in p for p in problems)
    assert pointer_problems(FAKE, 'see [x](getting-started.md), "Exit statuses"') == []
    module = ROOT / "evolve_envs" / "fake.py"
    doc = '"""See the README, "info keys", and docs/wrappers.md,\n"`info` keys"."""\n'
    (problem,) = pointer_problems(module, doc)  # the README lost that section: the page has it
    assert problem.endswith('"info keys": no such heading in README.md')
    wrapped = '# the model\'s done (docs/trust.md, "Online alarm ...")\n'
    assert pointer_problems(ROOT / "evolve_envs" / "x.yaml", wrapped) == []  # a heading's start


def test_a_missing_path_fails() -> None:
    text = "the config evolve_envs/configs/distrl/libero_11.yaml and docs/training.md\n"
    (problem,) = path_problems(FAKE, text)
    assert "evolve_envs/configs/distrl/libero_11.yaml: no such file" in problem


def test_a_command_that_does_not_parse_fails() -> None:
    text = (
        "```bash\n"
        "evolve-envs train --config reach_place --minuets 5\n"
        "evolve-reward-server --backend vlac --tokenfile t \\\n    --port 8111\n"
        "evolve-envs rollout --config reach_place --episodes 2 2> err.txt | tail -1\n"
        "```\n"
        "Shown in part: `evolve-envs trian --resume runs/x` and `evolve-envs train --adress`.\n"
    )
    problems = command_problems(FAKE, text)
    assert len(problems) == 4, problems
    assert "unrecognized arguments: --minuets" in problems[0]
    assert problems[1].endswith("unrecognized arguments: --tokenfile t")  # the lines are joined
    assert "no subcommand 'trian'" in problems[2] and "no option '--adress'" in problems[3]


# ------------------------------------------------------------------ the key table


def test_the_reward_model_key_table_lists_every_key_of_the_schema() -> None:
    from evolve_envs.stack.config import PickleScorerConfig, ProgressModelConfig, VideoScoreConfig

    text = (ROOT / "docs" / "wrappers.md").read_text()
    table = text[text.index("| key | default | meaning |") :].split("\n\n", 1)[0]
    listed = {k for row in table.splitlines()[2:] for k in re.findall(r"`(\w+)", row.split("|")[1])}
    schema = set().union(
        *(c.model_fields for c in (ProgressModelConfig, VideoScoreConfig, PickleScorerConfig))
    )
    assert schema - listed == set(), "keys of the schema the table does not list"
    assert {"service_num", "ignore_terminations"} <= listed


@pytest.mark.parametrize("rule", ["change", "intensity", "reach_place", "reach_place_hackable"])
def test_every_mock_rule_says_what_its_number_is(rule: str) -> None:
    from evolve_envs import load_config
    from evolve_envs.cli.reports.progress_source import MOCK_RULES, progress_source
    from evolve_envs.reward.service.backends.mock import RULES

    assert set(MOCK_RULES) == set(RULES)
    block = {"enable": True, "endpoint": "embedded", "embedded_backend_kwargs": {"rule": rule}}
    rm = load_config({"reward_model": block}).reward_model
    source = progress_source(rm)
    assert source.startswith(f"mock reward model, rule {rule}: ")
    if rule in ("change", "intensity"):  # the stand-ins are never called task progress
        assert "not task progress" in source


def test_the_pages_reach_each_other(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    assert "](docs/reward-models.md)" in readme and "](docs/security.md)" in readme
