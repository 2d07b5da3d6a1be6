"""The decoded-body budget: counts through shared references, cycles, JSON text before parsing."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evolve_envs.reward.protocol.body_budget import (
    BodyBudget,
    BodyBudgetError,
    check_json_body,
    measure_body,
    measure_tree,
)

LARGE = BodyBudget(max_nodes=10**9, max_bytes=10**12, max_depth=10**4)


def _naive(obj: Any) -> tuple[int, int, int]:
    """Nodes, str/bytes characters and depth of `obj` walked as a tree (aliases distinct)."""
    if isinstance(obj, bool) or obj is None:
        return 1, 0, 0
    if isinstance(obj, dict):
        parts = [_naive(x) for pair in obj.items() for x in pair]
    elif isinstance(obj, list | tuple):
        parts = [_naive(x) for x in obj]
    elif isinstance(obj, str | bytes):
        return 1, len(obj), 0
    else:  # ints count their bytes (a pickle may carry a huge one)
        return 1, (obj.bit_length() + 7) // 8 if isinstance(obj, int) else 0, 0
    return (
        1 + sum(p[0] for p in parts),
        sum(p[1] for p in parts),
        1 + max((p[2] for p in parts), default=0),
    )


_leaf = st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=3), st.binary(max_size=3))


@st.composite
def _dag(draw: st.DrawFn) -> Any:
    """Small values whose containers may be shared."""
    pool: list[Any] = [draw(_leaf)]
    for _ in range(draw(st.integers(0, 8))):
        picks = draw(st.lists(st.sampled_from(pool), max_size=4))
        kind = draw(st.sampled_from(["list", "tuple", "dict"]))
        node = (
            dict(enumerate(picks))
            if kind == "dict"
            else (picks if kind == "list" else tuple(picks))
        )
        pool.append(node)
    return pool[-1]


@settings(max_examples=200, deadline=None)
@given(_dag())
def test_counts_match_a_naive_walk_that_treats_aliases_as_distinct(value: Any) -> None:
    size = measure_tree(value, LARGE)
    assert (size.nodes, size.nbytes, size.depth) == _naive(value)


@settings(max_examples=100, deadline=None)
@given(_dag())
def test_json_text_count_bounds_the_parsed_value(value: Any) -> None:
    """The JSON scan refuses exactly what is over the budget, up to keys (counted in both)."""
    doc = {"field": json.loads(json.dumps(value, default=lambda b: b.hex()))}
    nodes = measure_tree(doc, LARGE).nodes
    text = json.dumps(doc).encode()
    check_json_body(text, BodyBudget(max_nodes=nodes + 1, max_depth=64))
    if nodes > 3:
        with pytest.raises(BodyBudgetError, match="field: holds more than"):
            check_json_body(text, BodyBudget(max_nodes=nodes // 2, max_depth=64))


def test_shared_subtrees_are_walked_once() -> None:
    inner: list = [0]
    for _ in range(200):  # 2^200 paths
        inner = [inner, inner]
    assert measure_tree(inner, BodyBudget(max_depth=300, max_nodes=2**300)).nodes == 3 * 2**200 - 1


def test_cycles_and_numpy_and_fields() -> None:
    loop: dict = {}
    loop["self"] = [loop]
    with pytest.raises(BodyBudgetError, match="meta: holds a reference to itself") as info:
        measure_body({"images": [b"x"], "meta": loop}, LARGE)
    assert info.value.status_code == 422 and info.value.field == "meta"
    with pytest.raises(BodyBudgetError, match="prompts: expands to more than 1000 values"):
        measure_body({"prompts": np.zeros(5000, np.float32)}, BodyBudget(max_nodes=1000))
    with pytest.raises(BodyBudgetError, match="images: expands to more than 100 bytes"):
        measure_body({"images": [b"x" * 60] * 2}, BodyBudget(max_bytes=100))
    # fields share one budget: the one that goes over it is named
    with pytest.raises(BodyBudgetError, match="b: expands"):
        measure_body({"a": [0] * 6, "b": [0] * 6}, BodyBudget(max_nodes=12))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"frames": ' + b"[" * 70 + b"]" * 70 + b"}", "frames: nested deeper than 64"),
        (b'{"a": "[[[[,,,,", "x": [' + b"1," * 200 + b"1]}", "x: holds more than 100"),
    ],
)
def test_json_scan_names_the_field(text: bytes, message: str) -> None:
    with pytest.raises(BodyBudgetError, match=message):
        check_json_body(text, BodyBudget(max_nodes=100, max_depth=64))


def test_json_scan_skips_structure_inside_strings() -> None:
    text = json.dumps({"task": "[" * 500 + "," * 500, "frames": ["a"]}).encode()
    check_json_body(text, BodyBudget(max_nodes=100, max_depth=64))
