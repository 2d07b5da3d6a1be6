"""Retrace(lambda) against the defining double sum, in NumPy and torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evolve_envs.training.distrl.retrace import retrace_targets, td_errors


def brute_force(rewards, values, bootstrap, rhos, dones, gamma, lam):
    """V(s_t) + sum_{k>=t} gamma^(k-t) prod_{i=t+1..k} c_i delta_k, stopping after a done."""
    t_len = len(rewards)
    c = [lam * min(1.0, r) for r in rhos]
    out = []
    for t in range(t_len):
        total = values[t]
        for k in range(t, t_len):
            if k == t_len - 1:
                next_v = bootstrap
            else:
                next_v = values[k + 1]
            if dones[k]:
                next_v = 0.0
            delta = rewards[k] + gamma * next_v - values[k]
            coef = gamma ** (k - t)
            for i in range(t + 1, k + 1):
                coef *= c[i]
            total += coef * delta
            if dones[k]:
                break
        out.append(total)
    return np.array(out)


def random_case(rng, t_len, with_dones):
    rewards = rng.normal(size=t_len)
    values = rng.normal(size=t_len)
    rhos = np.exp(rng.normal(scale=0.7, size=t_len))  # some above 1, some below
    dones = np.zeros(t_len, bool)
    if with_dones:
        dones[rng.choice(t_len, size=2, replace=False)] = True
    return rewards, values, float(rng.normal()), rhos, dones


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("with_dones", [False, True])
def test_matches_brute_force_numpy_and_torch(lam, with_dones):
    rng = np.random.default_rng(int(lam * 10) + 100 * with_dones)
    gamma = 0.9
    for t_len in (1, 2, 7, 20):
        if with_dones and t_len < 2:
            continue
        r, v, boot, rho, d = random_case(rng, t_len, with_dones)
        expected = brute_force(r, v, boot, rho, d, gamma, lam)
        got = retrace_targets(r, v, boot, rho, d, gamma, lam)
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)

        tv = torch.tensor(v, dtype=torch.float32)
        got_t = retrace_targets(
            torch.tensor(r, dtype=torch.float32),
            tv,
            torch.tensor(boot, dtype=torch.float32),
            torch.tensor(rho, dtype=torch.float32),
            torch.tensor(d),
            gamma,
            lam,
        )
        assert isinstance(got_t, torch.Tensor) and got_t.dtype == torch.float32
        np.testing.assert_allclose(got_t.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_terminal_step_cuts_trace_and_bootstrap():
    r = np.array([1.0, 2.0, 3.0])
    v = np.array([0.5, 0.5, 0.5])
    d = np.array([False, True, False])
    out = retrace_targets(r, v, 100.0, np.ones(3), d, gamma=1.0, lam=1.0)
    # step 1 terminated: its target is its reward alone; step 0 does not see step 2 at all
    assert out[1] == pytest.approx(2.0)
    assert out[0] == pytest.approx(1.0 + 2.0)
    assert out[2] == pytest.approx(3.0 + 100.0)
    # a terminated last step ignores the bootstrap value
    out = retrace_targets(r, v, 1e6, np.ones(3), np.array([False, False, True]), 1.0, 1.0)
    assert out[2] == pytest.approx(3.0)


def test_lambda_zero_is_one_step_td():
    rng = np.random.default_rng(0)
    r, v, boot, rho, d = random_case(rng, 15, True)
    out = retrace_targets(r, v, boot, rho, d, 0.97, 0.0)
    np.testing.assert_allclose(out, v + td_errors(r, v, boot, d, 0.97))
    next_v = np.append(v[1:], boot)
    np.testing.assert_allclose(out, r + 0.97 * np.where(d, 0.0, next_v))


def test_lambda_one_on_policy_is_discounted_return():
    rng = np.random.default_rng(1)
    r = rng.normal(size=6)
    v = rng.normal(size=6)
    out = retrace_targets(r, v, 2.0, np.ones(6), np.zeros(6, bool), 0.8, 1.0)
    ret = 2.0
    expected = []
    for k in reversed(range(6)):
        ret = r[k] + 0.8 * ret
        expected.append(ret)
    np.testing.assert_allclose(out, expected[::-1])


def test_trace_uses_truncated_ratios():
    r = np.array([0.0, 1.0])
    v = np.zeros(2)
    big = retrace_targets(r, v, 0.0, np.array([1.0, 5.0]), np.zeros(2, bool), 1.0, 1.0)
    one = retrace_targets(r, v, 0.0, np.array([1.0, 1.0]), np.zeros(2, bool), 1.0, 1.0)
    half = retrace_targets(r, v, 0.0, np.array([1.0, 0.5]), np.zeros(2, bool), 1.0, 1.0)
    assert big[0] == one[0] == pytest.approx(1.0)  # c = min(1, rho)
    assert half[0] == pytest.approx(0.5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="rhos"):
        retrace_targets(np.zeros(3), np.zeros(3), 0.0, np.zeros(2), np.zeros(3, bool), 0.9, 0.5)
    with pytest.raises(ValueError, match="lam"):
        retrace_targets(np.zeros(3), np.zeros(3), 0.0, np.zeros(3), np.zeros(3, bool), 0.9, 1.5)
