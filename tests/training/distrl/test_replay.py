"""Sum-tree and prioritized replay: sampling frequencies, IS weights, eviction, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evolve_envs.training.distrl.replay import PRIORITY_EPS, PrioritizedReplay
from evolve_envs.training.distrl.sum_tree import SumTree

# chi-square critical values at p = 0.001 (upper tail) for the degrees of freedom used below
CHI2_CRIT_001 = {6: 22.458, 4: 18.467}


def _chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


def test_sum_tree_internal_sums_and_find():
    rng = np.random.default_rng(0)
    tree = SumTree(13)  # not a power of two
    vals = rng.random(13)
    tree.update(np.arange(13), vals)
    assert tree.total == pytest.approx(vals.sum())
    # every internal node is the sum of its children
    t = tree._tree
    for node in range(1, tree._leaves):
        assert t[node] == pytest.approx(t[2 * node] + t[2 * node + 1])
    # prefix sums map to the leaf whose cumulative interval contains them
    cum = np.cumsum(vals)
    queries = rng.random(500) * vals.sum()
    expected = np.searchsorted(cum, queries, side="right")
    np.testing.assert_array_equal(tree.find(queries), expected)
    # partial update with a repeated index: the last value wins, sums follow
    tree.update([2, 5, 2], [10.0, 0.0, 3.0])
    vals[2], vals[5] = 3.0, 0.0
    assert tree.total == pytest.approx(vals.sum())
    np.testing.assert_allclose(tree.values(), vals)


@pytest.mark.parametrize("stratified", [False, True])
def test_sampling_frequencies_follow_p_alpha(stratified):
    alpha = 0.7
    prios = np.array([0.1, 0.5, 1.0, 2.0, 3.0, 0.0, 4.0, 8.0])
    buf = PrioritizedReplay(capacity=8, alpha=alpha, beta=0.5)
    for i, p in enumerate(prios):
        buf.add(f"item{i}", p)
    rng = np.random.default_rng(1234)
    counts = np.zeros(8)
    for _ in range(100):
        _, idx, _ = buf.sample(1000, rng, stratified=stratified)
        counts += np.bincount(idx, minlength=8)
    p_alpha = np.maximum(prios, PRIORITY_EPS) ** alpha
    probs = p_alpha / p_alpha.sum()
    # the zero-priority item is floored to eps, so it is practically never drawn
    assert counts[5] <= 1
    keep = np.arange(8) != 5
    assert _chi2(counts[keep], probs[keep] / probs[keep].sum()) < CHI2_CRIT_001[6]
    # the same test rejects the distribution without the alpha exponent (the test has power)
    wrong = np.maximum(prios, PRIORITY_EPS) / prios.sum()
    assert _chi2(counts[keep], wrong[keep] / wrong[keep].sum()) > 10 * CHI2_CRIT_001[6]


def test_uniform_option_and_alpha_zero_sample_uniformly():
    for buf in (
        PrioritizedReplay(capacity=5, alpha=0.6, beta=0.4, uniform=True),
        PrioritizedReplay(capacity=5, alpha=0.0, beta=0.4),
    ):
        for i, p in enumerate([0.01, 1.0, 5.0, 100.0, 0.5]):
            buf.add(i, p)
        counts = np.zeros(5)
        rng = np.random.default_rng(7)
        for _ in range(20):
            items, idx, w = buf.sample(1000, rng)
            counts += np.bincount(idx, minlength=5)
            np.testing.assert_array_equal(w, np.ones(1000, np.float32))
            assert items == [int(i) for i in idx]
        assert _chi2(counts, np.full(5, 0.2)) < CHI2_CRIT_001[4]


def test_importance_weights_formula():
    alpha, beta = 0.6, 0.4
    prios = np.array([0.5, 1.0, 2.0, 4.0])
    buf = PrioritizedReplay(capacity=10, alpha=alpha, beta=beta)
    for i, p in enumerate(prios):
        buf.add(i, p)
    _, idx, w = buf.sample(64, np.random.default_rng(3))
    probs = prios**alpha / (prios**alpha).sum()
    n = len(prios)  # N is the number of stored items, not the capacity
    raw = (n * probs) ** (-beta)
    expected = raw[idx] / raw.max()
    np.testing.assert_allclose(w, expected, rtol=1e-6)
    assert w.dtype == np.float32 and w.max() <= 1.0
    # beta = 1 fully compensates: w * P is constant across items
    buf.beta = 1.0
    _, idx, w = buf.sample(64, np.random.default_rng(4))
    np.testing.assert_allclose(w * probs[idx], np.full(64, probs.min()), rtol=1e-6)


def test_beta_setter_and_annealing():
    buf = PrioritizedReplay(capacity=2, alpha=0.6, beta=0.4)
    assert buf.anneal_beta(0.0) == pytest.approx(0.4)
    assert buf.anneal_beta(0.5) == pytest.approx(0.7)
    assert buf.anneal_beta(3.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="beta"):
        buf.beta = 1.5


def test_circular_eviction_overwrites_oldest():
    buf = PrioritizedReplay(capacity=3, alpha=1.0, beta=0.4)
    slots = [buf.add(f"t{i}", float(i + 1)) for i in range(5)]
    assert slots == [0, 1, 2, 0, 1]
    assert len(buf) == 3 and buf.cursor == 2
    assert buf.items() == ["t3", "t4", "t2"]
    assert buf.stored() == ([0, 1, 2], ["t3", "t4", "t2"])
    np.testing.assert_allclose(buf.priorities(), [4.0, 5.0, 3.0])
    assert buf._tree.total == pytest.approx(12.0)
    sampled = set()
    rng = np.random.default_rng(0)
    for _ in range(20):
        items, _, _ = buf.sample(16, rng)
        sampled.update(items)
    assert sampled == {"t2", "t3", "t4"}


def test_priority_validation_and_updates():
    buf = PrioritizedReplay(capacity=4, alpha=1.0, beta=0.4)
    with pytest.raises(ValueError, match="finite"):
        buf.add("x", float("nan"))
    with pytest.raises(ValueError, match=">= 0"):
        buf.add("x", -1.0)
    assert len(buf) == 0  # nothing half-inserted
    buf.add("a", 0.0)
    assert buf.priorities()[0] == PRIORITY_EPS
    buf.add("b", 1.0)
    buf.update_priorities([0, 1], [3.0, 1.0])
    assert buf._tree.total == pytest.approx(4.0)
    with pytest.raises(ValueError, match="finite"):
        buf.update_priorities([0], [float("inf")])
    with pytest.raises(IndexError):
        buf.update_priorities([3], [1.0])  # slot 3 holds nothing yet
    np.testing.assert_allclose(buf.priorities(), [3.0, 1.0])
    # a slot overwritten between sampling and the update is skipped
    gens = buf.generations([0, 1])
    buf.add("c", 1.0)
    buf.add("d", 1.0)
    buf.add("e", 1.0)  # overwrites slot 0
    buf.update_priorities([0, 1], [9.0, 9.0], expected_generations=gens)
    np.testing.assert_allclose(buf.priorities(), [1.0, 9.0, 1.0, 1.0])


def test_state_dict_round_trip():
    rng = np.random.default_rng(5)
    buf = PrioritizedReplay(capacity=6, alpha=0.8, beta=0.5)
    for i in range(9):
        buf.add({"id": i}, float(rng.random() * 5))
    buf.sample(10, rng)
    buf.update_priorities([1, 2], [0.3, 7.0])
    buf.anneal_beta(0.25)

    state = buf.state_dict(include_items=True)
    other = PrioritizedReplay(capacity=6, alpha=0.1, beta=0.1)
    other.load_state_dict(state)
    assert len(other) == len(buf) and other.cursor == buf.cursor
    assert other.beta == buf.beta and other.alpha == buf.alpha
    assert (other.total_added, other.total_sampled, other.total_updates) == (9, 10, 2)
    np.testing.assert_array_equal(other.priorities(), buf.priorities())
    a = buf.sample(32, np.random.default_rng(9))
    b = other.sample(32, np.random.default_rng(9))
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[2], b[2])
    assert other.add("new", 1.0) == buf.add("new", 1.0)

    # metadata only, items given separately
    meta = buf.state_dict()
    assert "items" not in meta
    third = PrioritizedReplay(capacity=6)
    third.load_state_dict(meta, items=buf.items())
    np.testing.assert_array_equal(third.priorities(), buf.priorities())
    # metadata only, no items: counters survive, the buffer starts empty
    fourth = PrioritizedReplay(capacity=6)
    fourth.load_state_dict(meta)
    assert len(fourth) == 0 and fourth.total_added == buf.total_added
    with pytest.raises(ValueError, match="capacity"):
        PrioritizedReplay(capacity=7).load_state_dict(meta)


def test_sample_errors():
    buf = PrioritizedReplay(capacity=2)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1, np.random.default_rng(0))
    buf.add("a", 1.0)
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(0, np.random.default_rng(0))


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 9),
    alpha=st.sampled_from([0.0, 0.5, 1.0]),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 50), st.floats(0.0, 100.0)), max_size=40),
)
def test_buffer_matches_a_plain_list_model(capacity, alpha, ops):
    """Random adds and updates agree with a list-based reference (slots, priorities, sums)."""
    buf = PrioritizedReplay(capacity, alpha=alpha, beta=0.5)
    items: list[int] = []
    prios: list[float] = []
    cursor = 0
    for n, (is_add, pick, p) in enumerate(ops):
        if is_add or not items:
            slot = buf.add(n, p)
            assert slot == cursor
            if len(items) < capacity:
                items.append(n)
                prios.append(max(p, PRIORITY_EPS))
            else:
                items[cursor] = n
                prios[cursor] = max(p, PRIORITY_EPS)
            cursor = (cursor + 1) % capacity
        else:
            slot = pick % len(items)
            buf.update_priorities([slot], [p])
            prios[slot] = max(p, PRIORITY_EPS)
        assert buf.items() == items
        np.testing.assert_allclose(buf.priorities(), prios)
        expected_total = len(prios) if alpha == 0 else float(np.sum(np.array(prios) ** alpha))
        assert buf._tree.total == pytest.approx(expected_total, rel=1e-9)
    if items:
        drawn, idx, w = buf.sample(8, np.random.default_rng(0))
        assert drawn == [items[i] for i in idx]
        assert np.all((w > 0) & (w <= 1.0))
