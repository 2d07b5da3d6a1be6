"""The house rules of the package's source: ``# fmt: skip`` on data tables only, and at most 534
``Any`` in annotations. Each check is shown failing on a copy of the package with a fault. (A
module is as long as its one concern needs: no line cap, no docstring share.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.layout import house_rules as hr


def _not_source(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if not n.endswith(".py") and not Path(folder, n).is_dir()}


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    """The package's modules, copied (its data files left out)."""
    out = tmp_path / "evolve_envs"
    shutil.copytree(hr.PACKAGE, out, ignore=_not_source)
    return out


def test_no_fmt_skip_outside_data_tables() -> None:
    assert hr.fmt_skips() == {}


def test_any_in_annotations_is_at_most_534() -> None:
    assert hr.measure()[2] <= hr.MAX_ANY


def test_the_check_catches_a_fmt_skip_outside_a_table(copy: Path) -> None:
    target = copy / "progress" / "task_text.py"
    before = hr.fmt_skips(copy).get("evolve_envs.progress.task_text", [])
    n = len(target.read_text().splitlines())
    table = "TABLE = [1,  2,\n         3]  # fmt: skip\n"
    code = "def _f():\n    return [1,  2]  # fmt: skip\nlower = [1,  2]  # fmt: skip\n"
    target.write_text(target.read_text() + table + code)
    assert hr.fmt_skips(copy)["evolve_envs.progress.task_text"] == before + [n + 4, n + 5]


def test_the_check_counts_any_in_annotations(copy: Path) -> None:
    _, _, before = hr.measure(copy)
    planted = (
        "from typing import Any\n"
        "def f(a: Any, *b: 'Any', **c: dict[str, Any]) -> typing.Any: ...\n"
        "x: list[Any] = []\n"
        "y = Any  # not an annotation\n"
    )
    (copy / "progress" / "loose.py").write_text(planted)
    assert hr.measure(copy)[2] == before + 5
    (copy / "progress" / "loose.py").write_text(planted * (hr.MAX_ANY // 5 + 1))
    assert hr.measure(copy)[2] > hr.MAX_ANY
