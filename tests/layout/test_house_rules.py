"""The house rules of the package's source: modules of at most 400 lines (or a reason written at
the top), ``# fmt: skip`` on data tables only, docstrings at most 15 % of the lines, and at most
534 ``Any`` in annotations. Each check is shown failing on a copy of the package with a fault."""

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


def test_no_module_over_400_lines_without_a_reason() -> None:
    assert hr.long_modules() == {}


def test_no_fmt_skip_outside_data_tables() -> None:
    assert hr.fmt_skips() == {}


def test_docstrings_are_at_most_15_percent_of_the_lines() -> None:
    lines, docs, _ = hr.measure()
    assert docs / lines <= hr.MAX_DOCSTRING_SHARE, f"{docs} of {lines} lines ({docs / lines:.1%})"


def test_any_in_annotations_is_at_most_534() -> None:
    assert hr.measure()[2] <= hr.MAX_ANY


def test_the_check_catches_a_long_module_and_reads_its_reason(copy: Path) -> None:
    target = copy / "progress" / "task_text.py"
    body = target.read_text().splitlines()
    target.write_text("\n".join(body + ["x = 0"] * (401 - len(body))) + "\n")
    assert hr.long_modules(copy).get("evolve_envs.progress.task_text") == 401
    target.write_text("# Over 400 lines: one table of task names\n" + target.read_text())
    assert "evolve_envs.progress.task_text" not in hr.long_modules(copy)
    target.write_text("\n" * 10 + target.read_text())  # the reason below the first 10 lines
    assert "evolve_envs.progress.task_text" in hr.long_modules(copy)


def test_the_check_catches_a_fmt_skip_outside_a_table(copy: Path) -> None:
    target = copy / "progress" / "task_text.py"
    before = hr.fmt_skips(copy).get("evolve_envs.progress.task_text", [])
    n = len(target.read_text().splitlines())
    table = "TABLE = [1,  2,\n         3]  # fmt: skip\n"
    code = "def _f():\n    return [1,  2]  # fmt: skip\nlower = [1,  2]  # fmt: skip\n"
    target.write_text(target.read_text() + table + code)
    assert hr.fmt_skips(copy)["evolve_envs.progress.task_text"] == before + [n + 4, n + 5]


def test_the_check_catches_too_many_docstring_lines(copy: Path) -> None:
    lines, docs, _ = hr.measure(copy)
    prose = '"""' + "a line of prose\n" * lines + '"""\n'
    (copy / "progress" / "prose.py").write_text(prose)
    lines, docs, _ = hr.measure(copy)
    assert docs / lines > hr.MAX_DOCSTRING_SHARE


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
