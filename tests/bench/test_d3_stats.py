"""The D3 race's statistics and the tuning's search space, without training anything."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _stats import bootstrap_ci, sign_flip_p  # noqa: E402


def test_sign_flip_p_is_exact_on_hand_computed_examples() -> None:
    # six positive differences: only "all +" and "all -" are as extreme: 2 of 2**6 patterns
    assert sign_flip_p([0.1, 0.2, 0.3, 0.1, 0.4, 0.2]) == pytest.approx(2 / 64)
    # equal magnitudes, one negative: |sum| >= 4 for 0, 1, 5 or 6 minus signs: 14 of 64
    assert sign_flip_p([1, -1, 1, 1, 1, 1]) == pytest.approx(14 / 64)
    # d = (3, 1): the patterns' |mean| are 2, 1, 1, 2; observed 2: 2 of 4
    assert sign_flip_p([3, 1]) == pytest.approx(0.5)
    # balanced differences are no evidence at all
    assert sign_flip_p([1, -1]) == 1.0
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    # five seeds can never reach p < 0.0625 (the point): the floor is 2 / 2**n
    assert sign_flip_p([1, 2, 3, 4, 5]) == pytest.approx(2 / 32)


def test_sign_flip_p_drops_non_finite_and_refuses_too_many_pairs() -> None:
    assert sign_flip_p([1.0, float("nan"), 2.0]) == pytest.approx(sign_flip_p([1.0, 2.0]))
    assert np.isnan(sign_flip_p([]))
    with pytest.raises(ValueError, match="2\\*\\*21"):
        sign_flip_p(np.ones(21))


def test_bootstrap_ci_on_hand_computed_examples() -> None:
    # two values: resampled means are 0 (1/4), 0.5 (1/2), 1 (1/4): the 2.5/97.5 % points are 0, 1
    assert bootstrap_ci([0.0, 1.0], seed=3) == (0.0, 1.0)
    assert bootstrap_ci([0.4, 0.4, 0.4]) == pytest.approx((0.4, 0.4))
    assert bootstrap_ci([0.7]) == (0.7, 0.7)
    assert all(np.isnan(bootstrap_ci([])))


def test_bootstrap_ci_is_seeded_and_brackets_the_mean() -> None:
    values = np.random.default_rng(0).uniform(0, 1, size=8)
    lo, hi = bootstrap_ci(values, seed=7)
    assert (lo, hi) == bootstrap_ci(values, seed=7)  # a report re-renders the same numbers
    assert values.min() <= lo < values.mean() < hi <= values.max()
    narrow = bootstrap_ci(values, level=0.5, seed=7)
    assert lo < narrow[0] < narrow[1] < hi


def test_tuning_knobs_are_reproducible_valid_and_the_shared_ones_equal() -> None:
    pytest.importorskip("ray.tune")
    import d3_tune

    from evolve_envs import load_train_config

    shared = {"lr", "entropy_coef", "entropy_target", "clip", "invalid_coef"}
    ranges = {a: {k.split(".")[1]: v for k, v in d3_tune.SPACE[a].items()} for a in d3_tune.ARMS}
    assert all(ranges["distrl"][k] == ranges["grpo"][k] for k in shared)
    for arm in d3_tune.ARMS:
        # trial 0 is the shipped block; later trials depend only on (search seed, arm, trial)
        shipped = d3_tune.shipped_knobs(arm)
        assert d3_tune.sample_knobs(arm, 0, 0) == shipped
        later = [d3_tune.sample_knobs(arm, i, 0) for i in (3, 1, 2)]
        assert later[1] == d3_tune.sample_knobs(arm, 1, 0) and later[0] != later[1]
        for knobs in [shipped, *later]:
            overrides = [f"algo={arm}", *d3_tune.knob_overrides(knobs)]
            cfg = load_train_config(d3_tune.BASE_CONFIG, overrides=overrides)
            block = cfg.distrl if arm == "distrl" else cfg.grpo
            for key, value in knobs.items():
                assert getattr(block, key.split(".")[1]) == value


def test_slow_regime_overrides_make_three_workers_of_mixed_speed() -> None:
    from _d3_runs import TUNED_CONFIG, regime_overrides

    from evolve_envs import load_train_config

    assert regime_overrides("instant") == []
    cfg = load_train_config(TUNED_CONFIG, overrides=regime_overrides("slow"))
    assert cfg.workers.num_workers == 3 and cfg.workers.step_delay_s == [0.02, 0.02, 0.06]
    assert cfg.reward_model.embedded_backend_kwargs == {"rule": "reach_place", "latency_ms": 500}
    assert cfg.reward_model.calls == "deferred"  # settled episodes: no step waits
    with pytest.raises(ValueError, match="regime"):
        regime_overrides("fast")
