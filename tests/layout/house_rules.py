"""The package's house rules, read from the source: ``# fmt: skip`` and ``Any`` in annotations
(``measure`` also counts lines and docstring lines, for the record). Each function takes the
package's folder, so a test can run it on a copy with a planted fault.

>>> fmt_skips_outside_tables_in("X = [1,  2]  # fmt: skip\\nf( 1 )  # fmt: skip\\n")
[2]
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

from tests.layout.import_graph import PACKAGE, modules

MAX_ANY = 534
UPPER = re.compile(r"_?[A-Z][A-Z0-9_]*")


def _is_table(node: ast.stmt) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return isinstance(node, (ast.Assign, ast.AnnAssign)) and all(
        isinstance(t, ast.Name) and UPPER.fullmatch(t.id) for t in targets
    )


@cache
def fmt_skips_outside_tables_in(source: str) -> list[int]:
    """The lines of ``source`` whose ``# fmt: skip`` is not on a module-level assignment to an
    UPPER_CASE name (a data table)."""
    tables = {
        line
        for node in ast.parse(source).body
        if _is_table(node)
        for line in range(node.lineno, node.end_lineno + 1)
    }
    return [
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT and "fmt: skip" in tok.string and tok.start[0] not in tables
    ]


def fmt_skips(root: Path = PACKAGE) -> dict[str, list[int]]:
    """Module -> the lines of its ``# fmt: skip`` comments outside data tables."""
    found = {name: fmt_skips_outside_tables_in(p.read_text()) for name, p in modules(root).items()}
    return {name: lines for name, lines in found.items() if lines}


def _docstring_lines(tree: ast.AST) -> int:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return sum(
        node.body[0].end_lineno - node.body[0].lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    )


def _annotations(tree: ast.AST) -> list[ast.expr]:
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            every = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            out += [x.annotation for x in every if x is not None and x.annotation is not None]
            out += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            out.append(node.annotation)
    return out


def _any_in(annotation: ast.expr) -> int:
    return sum(
        (isinstance(s, ast.Name) and s.id == "Any")
        or (isinstance(s, ast.Attribute) and s.attr == "Any")
        or (isinstance(s, ast.Constant) and isinstance(s.value, str) and "Any" in s.value)
        for s in ast.walk(annotation)
    )


@cache
def _measure_source(source: str) -> tuple[int, int, int]:
    tree = ast.parse(source)
    return source.count("\n"), _docstring_lines(tree), sum(map(_any_in, _annotations(tree)))


def measure(root: Path = PACKAGE) -> tuple[int, int, int]:
    """(lines, docstring lines, ``Any`` occurrences in annotations) over every module."""
    found = [_measure_source(path.read_text()) for path in modules(root).values()]
    return sum(f[0] for f in found), sum(f[1] for f in found), sum(f[2] for f in found)
