"""The decoded-body budget: values, bytes and depth a body may reach once decoded, shared
references counted each time they are reached (evolve_envs/reward/service/README.md, "Errors,
limits and safety").

Example:
    >>> budget = BodyBudget(max_nodes=100, max_bytes=1000, max_depth=8)
    >>> measure_tree({"prompts": ["a", "b"]}, budget)
    TreeSize(nodes=5, nbytes=9, depth=2)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "DEFAULT_BODY_BUDGET",
    "BodyBudget",
    "BodyBudgetError",
    "TreeSize",
    "check_json_body",
    "measure_body",
    "measure_tree",
]


class BodyBudgetError(ValueError):
    """A decoded body is over the budget (413) or refers to itself (422); names the field."""

    def __init__(self, message: str, *, field: str | None, status_code: int = 413) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.status_code = status_code


@dataclass(frozen=True)
class BodyBudget:
    """Most values (`max_nodes`), str/bytes characters (`max_bytes`) and nesting levels
    (`max_depth`) one decoded request body may hold, shared references counted each time."""

    max_nodes: int = 100_000
    max_bytes: int = 64 * 1024 * 1024
    max_depth: int = 64

    def __post_init__(self) -> None:
        for name in ("max_nodes", "max_bytes", "max_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


#: The service's default budget (`evolve_envs.reward.service.limits`: max_body_nodes,
#: max_body_bytes, max_body_depth).
DEFAULT_BODY_BUDGET = BodyBudget()


class TreeSize(NamedTuple):
    """The expanded size of a decoded value: values, str/bytes characters, nesting levels."""

    nodes: int
    nbytes: int
    depth: int


_CONTAINERS = (list, tuple, dict)
_NOTHING = TreeSize(0, 0, 0)


def _leaf_size(item: object) -> TreeSize | None:
    """The size of a non-container value, or None for a list, tuple or dict."""
    kind = type(item)
    if kind in _CONTAINERS:
        return None
    if kind is str or kind is bytes or kind is bytearray:
        return TreeSize(1, len(item), 0)
    if kind is int:
        return TreeSize(1, (item.bit_length() + 7) // 8, 0)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(item, np.ndarray):
        return TreeSize(_tolist_nodes(item.shape), int(item.nbytes), item.ndim)
    return TreeSize(1, 0, 0)


def _tolist_nodes(shape: tuple[int, ...]) -> int:
    """The Python objects `ndarray.tolist()` makes for an array of `shape`: its elements and
    every (nested) list, so `(2**40, 0)` counts its 2^40 empty lists, not its 0 elements."""
    nodes, rows = 0, 1
    for n in shape:
        nodes += rows  # the lists at this level
        rows *= n
    return nodes + rows


def _children(item: object) -> Iterator[object]:
    if type(item) is dict:
        return (child for pair in item.items() for child in pair)
    return iter(item)


def measure_tree(
    obj: object, budget: BodyBudget, field: str | None = None, spent: TreeSize = _NOTHING
) -> TreeSize:
    """The expanded size of `obj`, raising `BodyBudgetError` (naming `field`) past `budget`.

    Shared subtrees are walked once and added each time reached (linear time); a cycle is 422.
    `spent` is what other fields already used.
    """
    size = _leaf_size(obj)
    if size is not None:
        _check(size, budget, field, spent)
        return size
    memo: dict[int, TreeSize] = {}
    on_path: set[int] = {id(obj)}
    # frame: [container, its children, nodes, bytes, depth below]
    stack: list[list[object]] = [[obj, _children(obj), 1, 0, 0]]
    while True:
        frame = stack[-1]
        child = next(frame[1], _END)
        if child is _END:
            stack.pop()
            on_path.discard(id(frame[0]))
            size = TreeSize(frame[2], frame[3], frame[4] + 1)
            memo[id(frame[0])] = size
            if not stack:
                _check(size, budget, field, spent)
                return size
            parent = stack[-1]
        else:
            parent = frame
            size = _leaf_size(child)
            if size is None:
                key = id(child)
                if key in on_path:
                    raise BodyBudgetError(
                        "holds a reference to itself (a cycle)", field=field, status_code=422
                    )
                size = memo.get(key)
                if size is None:
                    if len(stack) + spent.depth >= budget.max_depth:
                        raise BodyBudgetError(
                            f"nested deeper than {budget.max_depth} levels", field=field
                        )
                    stack.append([child, _children(child), 1, 0, 0])
                    on_path.add(key)
                    continue
        parent[2] += size.nodes
        parent[3] += size.nbytes
        parent[4] = max(parent[4], size.depth)
        _check(TreeSize(parent[2], parent[3], len(stack) + parent[4]), budget, field, spent)


_END = object()


def measure_body(obj: object, budget: BodyBudget) -> TreeSize:
    """`measure_tree` of a whole body, field by field, so the error names the field that went
    over."""
    if type(obj) is not dict:
        return measure_tree(obj, budget)
    nodes, nbytes, depth = 1, 0, 1
    for key, value in obj.items():
        field = str(key)[:64]
        for part in (key, value):
            size = measure_tree(part, budget, field, TreeSize(nodes, nbytes, 1))
            nodes, nbytes, depth = (
                nodes + size.nodes,
                nbytes + size.nbytes,
                max(depth, 1 + size.depth),
            )
    return TreeSize(nodes, nbytes, depth)


def _check(
    size: TreeSize, budget: BodyBudget, field: str | None, spent: TreeSize = _NOTHING
) -> None:
    size = TreeSize(size.nodes + spent.nodes, size.nbytes + spent.nbytes, size.depth + spent.depth)
    if size.nodes > budget.max_nodes:
        raise BodyBudgetError(
            f"expands to more than {budget.max_nodes} values (a shared reference counts each "
            "time it is reached)",
            field=field,
        )
    if size.nbytes > budget.max_bytes:
        raise BodyBudgetError(
            f"expands to more than {budget.max_bytes} bytes of strings and data (a shared "
            "reference counts each time it is reached)",
            field=field,
        )
    if size.depth > budget.max_depth:
        raise BodyBudgetError(f"nested deeper than {budget.max_depth} levels", field=field)


# A JSON string (escapes included) or one structural character.
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')


def check_json_body(body: bytes, budget: BodyBudget) -> None:
    """Raise `BodyBudgetError` if the JSON text `body` is over `budget`, before it is parsed.

    Counts 1 + commas + colons + non-empty containers; strings are skipped properly only when that
    upper bound is over. Malformed JSON is left to the parser.
    """
    opens = body.count(b"[") + body.count(b"{")
    if opens + body.count(b",") + body.count(b":") + 1 <= budget.max_nodes and (
        opens <= budget.max_depth
    ):
        return  # upper bounds (they include characters inside strings) within the budget
    nodes, depth = 1, 0
    field: str | None = None
    last_string = b""
    previous, previous_end = b"", 0
    for match in _JSON_TOKEN.finditer(body):
        token = match.group()
        char = token[:1]
        if char == b'"':
            last_string = token
            previous = char
            continue
        if char in b"[{":
            depth += 1
            nodes += 1
            if depth > budget.max_depth:
                raise BodyBudgetError(f"nested deeper than {budget.max_depth} levels", field=field)
        elif char in b"]}":
            depth -= 1
            if previous in (b"[", b"{") and not body[previous_end : match.start()].strip():
                nodes -= 1  # an empty container has no first element to count
        else:
            nodes += 1
            if char == b":" and depth == 1:
                field = last_string[1:-1].decode("utf-8", "replace")[:64]
        previous, previous_end = char, match.end()
        if nodes > budget.max_nodes:
            raise BodyBudgetError(
                f"holds more than {budget.max_nodes} values (JSON values, keys and containers)",
                field=field,
            )
