"""GRPO helpers: the array layout is explicit, and the documented snippet and bounds agree."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from evolve_envs.training.grpo import advantages as grpo
from evolve_envs.training.grpo.advantages import grpo_advantages

ROOT = Path(__file__).resolve().parents[3]


def test_layout_must_be_named() -> None:
    with pytest.raises(TypeError, match="layout"):
        grpo_advantages(torch.rand(4, 50), torch.zeros(4, 50, dtype=torch.bool), 2)
    with pytest.raises(ValueError, match="time_major"):
        grpo_advantages(np.zeros((4, 6)), np.zeros((4, 6), bool), 2, layout="BT")


def test_batch_major_scores_one_per_episode() -> None:
    rewards = torch.rand(4, 50, dtype=torch.float64)  # 4 episodes of 50 steps
    dones = torch.zeros(4, 50, dtype=torch.bool)
    dones[:, -1] = True
    res = grpo_advantages(rewards, dones, group_size=2, layout="batch_major")
    assert res.scores.shape == (4,) and res.advantages.shape == (4, 50)
    torch.testing.assert_close(res.scores, rewards.sum(dim=1))
    ref = grpo_advantages(rewards.T, dones.T, group_size=2, layout="time_major")
    torch.testing.assert_close(res.advantages, ref.advantages.T)
    assert torch.equal(res.loss_mask, ref.loss_mask.T)


def _readme_grpo_snippet() -> str:
    text = (ROOT / "docs" / "rlinf.md").read_text()
    section = text[text.index("## GRPO outside RLinf") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_grpo_snippet_runs() -> None:
    scope: dict = {}
    exec(compile(_readme_grpo_snippet(), "docs/rlinf.md", "exec"), scope)  # noqa: S102
    res = scope["res"]
    assert res.advantages.shape == (50, 4) and res.scores.shape == (4,)


def test_filter_bounds_agree_across_docstring_readme_and_config() -> None:
    cfg = yaml.safe_load(
        (ROOT / "evolve_envs/configs/rlinf/libero_10_grpo_openvlaoft.yaml").read_text()
    )
    lo, hi = cfg["algorithm"]["rewards_lower_bound"], cfg["algorithm"]["rewards_upper_bound"]
    doc = grpo.reward_filter_mask.__doc__ or ""
    assert f"({lo}, {hi})" in doc
    assert not re.search(r"\(0\.\d+, 0\.\d+\)", doc.replace(f"({lo}, {hi})", ""))
    readme = (ROOT / "docs" / "rlinf.md").read_text()
    assert f"`rewards_lower_bound: {lo}`" in readme and f"`rewards_upper_bound: {hi}`" in readme
