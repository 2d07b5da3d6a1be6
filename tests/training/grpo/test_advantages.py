"""GRPO advantages: hand-computed cases, a brute-force reference, properties, RLinf layout."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evolve_envs.training.grpo.advantages import (
    GRPO_EPS,
    episode_scores,
    first_done_mask,
    group_normalize,
    grpo_advantages,
    reward_filter_mask,
    rlinf_grpo_advantages,
)
from evolve_envs.training.grpo.groups import group_init_ids, group_seeds, stack_steps

# ----------------------------------------------------------------------------- reference


def reference_time_major(rewards, dones, group_size, eps=GRPO_EPS):
    """Straight loops over the definition (the oracle for the vectorised code)."""
    T, B = len(rewards), len(rewards[0])
    scores, masks = [], []
    for b in range(B):
        total, ended, col = 0.0, False, []
        for t in range(T):
            col.append(not ended)
            if not ended:
                total += rewards[t][b]
                if dones[t][b]:
                    ended = True
        scores.append(total)
        masks.append(col)
    adv = []
    for g in range(B // group_size):
        grp = scores[g * group_size : (g + 1) * group_size]
        mean = sum(grp) / group_size
        std = math.sqrt(sum((x - mean) ** 2 for x in grp) / (group_size - 1))
        adv += [(x - mean) / (std + eps) for x in grp]
    advantages = [[adv[b] if masks[b][t] else 0.0 for b in range(B)] for t in range(T)]
    mask = [[masks[b][t] for b in range(B)] for t in range(T)]
    return np.array(scores), np.array(adv), np.array(advantages), np.array(mask)


# ----------------------------------------------------------------------------- hand-computed


def test_hand_computed_group_of_four():
    # 3 steps, 4 envs in one group. Env 0 succeeds at step 1 (reward 1), env 1 gets 0.5 then
    # ends at step 2, env 2 never ends (sum 0.25), env 3 ends at step 0 with 0 and its later
    # rewards must not count.
    rewards = np.array(
        [
            [0.0, 0.5, 0.0, 0.0],
            [1.0, 0.0, 0.25, 9.0],
            [7.0, 0.0, 0.0, 9.0],
        ]
    )
    dones = np.array(
        [
            [False, False, False, True],
            [True, False, False, False],
            [False, True, False, True],
        ]
    )
    res = grpo_advantages(rewards, dones, group_size=4, layout="time_major")
    assert res.scores.tolist() == [1.0, 0.5, 0.25, 0.0]
    mean = 1.75 / 4
    std = math.sqrt(((1 - mean) ** 2 + (0.5 - mean) ** 2 + (0.25 - mean) ** 2 + mean**2) / 3)
    expected = [(s - mean) / (std + 1e-6) for s in (1.0, 0.5, 0.25, 0.0)]
    np.testing.assert_allclose(res.group_advantages, expected, rtol=1e-12)
    assert res.loss_mask.tolist() == [
        [True, True, True, True],
        [True, True, True, False],
        [False, True, True, False],
    ]
    np.testing.assert_allclose(res.advantages[0], expected)
    assert res.advantages[2, 0] == 0.0 and res.advantages[1, 3] == 0.0
    np.testing.assert_allclose(res.advantages[2, 1:3], expected[1:3])


def test_unbiased_std_two_members():
    # Two scores 0 and 1: mean 0.5, unbiased std sqrt(0.5) -> A = -/+ 0.5 / (0.7071 + 1e-6).
    adv = group_normalize(np.array([0.0, 1.0]), 2)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    np.testing.assert_allclose(adv, [-a, a], rtol=1e-12)


def test_zero_variance_group_is_zero_and_eps_matters():
    adv = group_normalize(np.array([0.7, 0.7, 0.7, 0.1, 0.3, 0.5]), 3)
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    # A tiny spread is divided by (std + eps), not blown up to +-1.
    tiny = group_normalize(np.array([0.0, 1e-9]), 2)
    assert abs(tiny[1]) < 1e-3


def test_episode_scores_and_mask_helpers():
    rewards = np.array([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]])
    dones = np.array([[False, False], [True, False], [True, False]])
    assert episode_scores(rewards, dones).tolist() == [3.0, 7.0]
    assert first_done_mask(dones)[:, 0].tolist() == [True, True, False]
    assert first_done_mask(dones)[:, 1].tolist() == [True, True, True]


def test_mask_after_first_done_can_be_switched_off():
    rewards = np.array([[1.0, 0.0], [5.0, 0.0]])
    dones = np.array([[True, False], [False, False]])
    res = grpo_advantages(rewards, dones, 2, mask_after_first_done=False, layout="time_major")
    assert res.scores.tolist() == [1.0, 0.0]  # the score still stops at the first done
    assert res.loss_mask.all()
    assert res.advantages[1, 0] == res.group_advantages[0]


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        group_normalize(np.zeros(4), 1)
    with pytest.raises(ValueError, match="not divisible by group_size 3"):
        group_normalize(np.zeros(4), 3)
    with pytest.raises(ValueError, match=r"dones must have the shape of rewards"):
        grpo_advantages(np.zeros((3, 2)), np.zeros((2, 2), bool), 2, layout="time_major")
    with pytest.raises(ValueError, match=r"n_chunks \+ 1"):
        rlinf_grpo_advantages(np.zeros((2, 2, 3)), np.zeros((2, 2, 3), bool), 2)
    with pytest.raises(ValueError, match="reward_type"):
        rlinf_grpo_advantages(
            np.zeros((2, 2, 3)), np.zeros((3, 2, 3), bool), 2, reward_type="token_level"
        )


# ----------------------------------------------------------------------------- RLinf layout


def test_rlinf_action_level_hand_computed():
    # 2 chunks of 3 actions, 2 envs (one group). Env 0 finishes on chunk 0's last action
    # with reward 1; env 1 never finishes, reward 0.5 on chunk 1 action 0.
    rewards = np.zeros((2, 2, 3))
    rewards[0, 0, 2] = 1.0
    rewards[1, 0, 0] = 3.0  # after env 0's done: ignored
    rewards[1, 1, 0] = 0.5
    dones = np.zeros((3, 2, 3), dtype=bool)  # chunk 0 of dones = flags before the first step
    dones[1, 0, 2] = True
    res = rlinf_grpo_advantages(rewards, dones, group_size=2, reward_type="action_level")
    assert res.scores.tolist() == [1.0, 0.5]
    a = 0.25 / (math.sqrt(0.125) + 1e-6)
    np.testing.assert_allclose(res.group_advantages, [a, -a])
    assert res.advantages.shape == (2, 2, 3)
    assert res.loss_mask[:, 0, :].tolist() == [[True, True, True], [False, False, False]]
    assert res.loss_mask[:, 1, :].all()
    np.testing.assert_allclose(res.advantages[0, 0], [a, a, a])
    np.testing.assert_allclose(res.advantages[1, 0], [0, 0, 0])


def test_rlinf_chunk_level_sums_whole_chunks():
    # Env 0 finishes on chunk 0's *first* action; chunk-level scoring still counts the whole
    # chunk (rewards summed over the chunk, as RLinf does), action-level only the first action.
    rewards = np.zeros((2, 2, 3))
    rewards[0, 0] = [1.0, 2.0, 4.0]
    rewards[1, 0] = [8.0, 8.0, 8.0]
    dones = np.zeros((3, 2, 3), dtype=bool)
    dones[1, 0, 0] = True
    chunk = rlinf_grpo_advantages(rewards, dones, 2, reward_type="chunk_level")
    action = rlinf_grpo_advantages(rewards, dones, 2, reward_type="action_level")
    assert chunk.scores.tolist() == [7.0, 0.0]
    assert action.scores.tolist() == [1.0, 0.0]
    assert chunk.advantages.shape == (2, 2, 1)
    assert chunk.loss_mask[:, 0, 0].tolist() == [True, False]
    assert action.loss_mask[0, 0].tolist() == [True, False, False]


def test_rlinf_done_before_first_step_masks_everything_but_keeps_score():
    rewards = np.ones((2, 2, 2))
    dones = np.zeros((3, 2, 2), dtype=bool)
    dones[0, 0, -1] = True  # the bootstrap flag of env 0
    res = rlinf_grpo_advantages(rewards, dones, 2)
    assert not res.loss_mask[:, 0].any()
    assert res.loss_mask[:, 1].all()
    assert res.scores.tolist() == [4.0, 4.0]


def test_rlinf_layout_equals_time_major_reference():
    rng = np.random.default_rng(3)
    n_chunks, batch, chunk = 4, 6, 3
    rewards = rng.normal(size=(n_chunks, batch, chunk))
    dones = np.zeros((n_chunks + 1, batch, chunk), dtype=bool)
    dones[1:] = rng.random((n_chunks, batch, chunk)) < 0.1
    res = rlinf_grpo_advantages(rewards, dones, group_size=3)
    flat_r = rewards.transpose(0, 2, 1).reshape(-1, batch)
    flat_d = dones[1:].transpose(0, 2, 1).reshape(-1, batch)
    scores, adv_b, adv, mask = reference_time_major(flat_r.tolist(), flat_d.tolist(), 3)
    np.testing.assert_allclose(res.scores, scores, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.group_advantages, adv_b, rtol=1e-9, atol=1e-12)
    got = res.advantages.transpose(0, 2, 1).reshape(-1, batch)
    np.testing.assert_allclose(got, adv, rtol=1e-9, atol=1e-12)
    assert (res.loss_mask.transpose(0, 2, 1).reshape(-1, batch) == mask).all()


def test_torch_in_torch_out():
    rewards = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float32)
    dones = torch.tensor([[False, False], [True, True]])
    res = grpo_advantages(rewards, dones, 2, layout="time_major")
    assert isinstance(res.advantages, torch.Tensor) and res.advantages.dtype == torch.float32
    assert res.loss_mask.dtype == torch.bool
    assert res.scores.tolist() == [1.0, 1.0]
    r3 = torch.zeros((2, 2, 4), dtype=torch.float32)
    r3[0, 1, 0] = 1.0
    out = rlinf_grpo_advantages(r3, torch.zeros((3, 2, 4), dtype=torch.bool), 2)
    assert isinstance(out.advantages, torch.Tensor) and out.advantages.shape == (2, 2, 4)


def test_matches_real_rlinf_when_installed():
    """Cross-check with RLinf's own advantage code (runs where ``rlinf`` is importable)."""
    registry = pytest.importorskip("rlinf.algorithms.registry")
    metric_utils = pytest.importorskip("rlinf.utils.metric_utils")
    rng = np.random.default_rng(11)
    n_chunks, batch, chunk, group = 5, 8, 4, 4
    for reward_type in ("action_level", "chunk_level"):
        rewards = torch.from_numpy(rng.normal(size=(n_chunks, batch, chunk)).astype(np.float32))
        dones = torch.zeros((n_chunks + 1, batch, chunk), dtype=torch.bool)
        dones[1:] = torch.from_numpy(rng.random((n_chunks, batch, chunk)) < 0.08)
        loss_mask, loss_mask_sum = metric_utils.compute_loss_mask(dones)
        if reward_type == "chunk_level":
            loss_mask = loss_mask.any(dim=-1, keepdim=True)
            loss_mask_sum = loss_mask_sum[..., -1:]
        theirs = registry.calculate_adv_and_returns(
            task_type="embodied",
            adv_type="grpo",
            rewards=rewards,
            dones=dones,
            values=None,
            group_size=group,
            reward_type=reward_type,
            loss_mask=loss_mask,
            loss_mask_sum=loss_mask_sum,
            gamma=1.0,
            gae_lambda=1.0,
        )["advantages"]
        ours = rlinf_grpo_advantages(rewards, dones, group, reward_type=reward_type)
        assert ours.advantages.shape == theirs.shape
        torch.testing.assert_close(ours.advantages, theirs.to(torch.float32), rtol=1e-4, atol=1e-5)
        assert torch.equal(ours.loss_mask, loss_mask)


# ----------------------------------------------------------------------------- properties

group_sizes = st.sampled_from([2, 3, 4, 8])


@st.composite
def rollouts(draw):
    g = draw(group_sizes)
    n_groups = draw(st.integers(1, 3))
    T = draw(st.integers(1, 12))
    B = g * n_groups
    values = st.floats(-5, 5, allow_nan=False, width=32)
    rewards = np.array(draw(st.lists(values, min_size=T * B, max_size=T * B))).reshape(T, B)
    dones = np.array(draw(st.lists(st.booleans(), min_size=T * B, max_size=T * B))).reshape(T, B)
    return rewards, dones, g


@settings(max_examples=150, deadline=None)
@given(rollouts())
def test_property_matches_reference(data):
    rewards, dones, g = data
    res = grpo_advantages(rewards, dones, g, layout="time_major")
    scores, adv_b, adv, mask = reference_time_major(rewards.tolist(), dones.tolist(), g)
    np.testing.assert_allclose(res.scores, scores, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.advantages, adv, rtol=1e-7, atol=1e-7)
    assert (res.loss_mask == mask).all()


@settings(max_examples=150, deadline=None)
@given(rollouts())
def test_property_group_sums_zero_and_mask(data):
    rewards, dones, g = data
    res = grpo_advantages(rewards, dones, g, layout="time_major")
    sums = res.group_advantages.reshape(-1, g).sum(axis=1)
    np.testing.assert_allclose(sums, 0.0, atol=1e-6)
    # Every step after an env's first done is masked and carries no advantage.
    for b in range(rewards.shape[1]):
        hits = np.flatnonzero(dones[:, b])
        if hits.size:
            after = slice(hits[0] + 1, None)
            assert not res.loss_mask[after, b].any()
            assert (res.advantages[after, b] == 0).all()
            assert res.loss_mask[: hits[0] + 1, b].all()


@settings(max_examples=100, deadline=None)
@given(group_sizes, st.integers(1, 4), st.floats(-10, 10, allow_nan=False))
def test_property_zero_variance_groups_give_zero(g, n_groups, value):
    scores = np.full(g * n_groups, value)
    assert (group_normalize(scores, g) == 0).all()


@settings(max_examples=100, deadline=None)
@given(rollouts(), st.floats(0.5, 20), st.floats(-3, 3))
def test_property_affine_invariance(data, scale, shift):
    # Rescaling all rewards and shifting every score equally leaves advantages (nearly) unchanged
    # -- the reason reward scale does not matter to GRPO but filter_rewards bounds do.
    rewards, dones, g = data
    base = grpo_advantages(rewards, dones, g, layout="time_major")
    scaled = grpo_advantages(rewards * scale, dones, g, layout="time_major")
    std = base.scores.reshape(-1, g).std(axis=1, ddof=1)
    ok = np.repeat(std > 1e-2, g)
    np.testing.assert_allclose(
        scaled.group_advantages[ok], base.group_advantages[ok], rtol=1e-3, atol=1e-3
    )
    shifted = group_normalize(base.scores + shift, g)
    np.testing.assert_allclose(shifted[ok], base.group_advantages[ok], rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- helpers


def test_group_init_ids_and_seeds_share_within_groups():
    ids = group_init_ids(12, 4, num_init_states=50, rng=1)
    groups = ids.reshape(3, 4)
    assert (groups == groups[:, :1]).all()
    assert len(set(groups[:, 0].tolist())) == 3  # distinct states per group
    assert ((ids >= 0) & (ids < 50)).all()
    # More groups than states: ids repeat, still shared within each group.
    many = group_init_ids(20, 2, num_init_states=3, rng=0).reshape(10, 2)
    assert (many[:, 0] == many[:, 1]).all()
    seeds = group_seeds(6, 3, rng=5)
    assert seeds[:3] == [seeds[0]] * 3 and seeds[3:] == [seeds[3]] * 3 and seeds[0] != seeds[3]
    assert group_seeds(6, 3, rng=5) == seeds  # reproducible


def test_gymnasium_vector_env_groups_share_initial_state():
    gym = pytest.importorskip("gymnasium")
    env = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
    try:
        obs, _ = env.reset(seed=group_seeds(4, 2, rng=0))
        np.testing.assert_array_equal(obs[0], obs[1])
        np.testing.assert_array_equal(obs[2], obs[3])
        assert not np.array_equal(obs[0], obs[2])
        rewards, dones = [], []
        for _ in range(30):
            _, r, term, trunc, _ = env.step(np.array([0, 1, 0, 1]))
            rewards.append(r)
            dones.append(term | trunc)
        res = grpo_advantages(
            stack_steps(rewards), stack_steps(dones), group_size=2, layout="time_major"
        )
        assert res.advantages.shape == (30, 4)
        np.testing.assert_allclose(res.group_advantages.reshape(2, 2).sum(axis=1), 0, atol=1e-9)
    finally:
        env.close()


def test_reward_filter_mask_bounds():
    scores = np.array([0.0, 0.0, 0.2, 0.6, 1.0, 1.0])
    keep = reward_filter_mask(scores, 2, 0.05, 0.95)
    assert keep.tolist() == [False, False, True, True, False, False]
    # RLinf's LIBERO defaults (0.5, 4.5) assume 0/5 success rewards: on a [0, 1] progress scale
    # they drop nearly everything.
    assert not reward_filter_mask(scores, 2, 0.5, 4.5)[:4].any()
    with pytest.raises(ValueError, match="lower_bound"):
        reward_filter_mask(scores, 2, 1.0, 0.0)
