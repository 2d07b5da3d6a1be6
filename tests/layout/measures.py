"""Measures of how far one idea spreads through the package, read from the source.

* :func:`formula_sites` — where the reward formula is written: a product with
  ``reward_weight`` or ``env_reward_weight`` (goal: one place, ``RewardTerms.mix``);
* :func:`alarm_feeds` — where the hacking alarm is fed an episode: a call of ``.add`` on a
  name or attribute called ``alarm`` or ``detector`` (goal: one place);
* :func:`files_naming` — the modules whose code names a setting (attribute, name, argument,
  keyword or a string other than a docstring): the files a reader opens to follow it from the
  config to the HTTP call. Modules that pass the whole block along without reading the setting
  do not count.

>>> formula_sites_in("r = self.env_reward_weight * env + w * m")
[1]
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.layout.import_graph import PACKAGE

WEIGHTS = ("reward_weight", "env_reward_weight")


def _named(node: ast.expr, names: tuple[str, ...]) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in names) or (
        isinstance(node, ast.Name) and node.id in names
    )


def formula_sites_in(source: str) -> list[int]:
    """The lines of ``source`` that multiply by a reward weight."""
    return sorted(
        {
            node.lineno
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mult)
            and (_named(node.left, WEIGHTS) or _named(node.right, WEIGHTS))
        }
    )


def alarm_feeds_in(source: str) -> list[int]:
    """The lines of ``source`` that feed an episode to a hacking detector."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add"
        and _named(node.func.value, ("alarm", "detector"))
    )


def _docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr):
            if isinstance(node.body[0].value, ast.Constant):
                out.add(id(node.body[0].value))
    return out


def names_setting(source: str, setting: str) -> bool:
    """Whether the code of ``source`` (docstrings aside) names ``setting``."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == setting:
            return True
        if isinstance(node, ast.Name) and node.id == setting:
            return True
        if isinstance(node, (ast.arg, ast.keyword)) and node.arg == setting:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if setting in node.value:
                return True
    return False


def _sources(package: Path) -> dict[str, str]:
    return {
        str(p.relative_to(package.parent)): p.read_text()
        for p in sorted(package.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def formula_sites(package: Path = PACKAGE) -> dict[str, list[int]]:
    """``{module path: lines}`` of every place the reward formula is written."""
    found = {path: formula_sites_in(src) for path, src in _sources(package).items()}
    return {path: lines for path, lines in found.items() if lines}


def alarm_feeds(package: Path = PACKAGE) -> dict[str, list[int]]:
    """``{module path: lines}`` of every place the hacking alarm is fed."""
    found = {path: alarm_feeds_in(src) for path, src in _sources(package).items()}
    return {path: lines for path, lines in found.items() if lines}


def files_naming(setting: str, package: Path = PACKAGE) -> list[str]:
    """The module paths whose code names ``setting``."""
    return [path for path, src in _sources(package).items() if names_setting(src, setting)]
