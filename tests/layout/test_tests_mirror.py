"""The tests mirror the package: a test of ``evolve_envs/a/b/c.py`` lives in ``tests/a/b/``
(``tests/a/b/c/`` when the module has several test files). Tests across packages live in
tests/e2e, multi-node Ray in tests/cluster; the docs, the layout, the benchmarks, the fuzzer, the
deployment manifests and shared helpers have their own folders."""

from __future__ import annotations

from pathlib import Path

from tests.layout.import_graph import PACKAGE

TESTS = PACKAGE.parent / "tests"
#: folders that test something other than one package (or hold helpers)
OWN = {"e2e", "cluster", "docs", "layout", "bench", "fuzz", "helpers", "deploy"}


def misplaced(tests: Path = TESTS, package: Path = PACKAGE) -> list[str]:
    """Folders holding test modules that mirror no package folder or module."""
    out = []
    for folder in sorted({p.parent for p in tests.rglob("test_*.py")}):
        parts = folder.relative_to(tests).parts
        if not parts or parts[0] in OWN:
            continue
        mirror = package.joinpath(*parts)
        if not (mirror.is_dir() or mirror.with_suffix(".py").is_file()):
            out.append(folder.relative_to(tests.parent).as_posix())
    return out


def test_every_test_folder_mirrors_the_package() -> None:
    assert misplaced() == []


def test_the_check_catches_a_theme_folder(tmp_path: Path) -> None:
    (tmp_path / "evolve_envs" / "train").mkdir(parents=True)
    (tmp_path / "evolve_envs" / "train" / "loop.py").touch()
    for folder in ("train", "train/loop", "distrl", "e2e"):
        (tmp_path / "tests" / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / folder / "test_x.py").touch()
    assert misplaced(tmp_path / "tests", tmp_path / "evolve_envs") == ["tests/distrl"]
