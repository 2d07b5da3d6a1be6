"""The transformers policy (ViT + instruction BERT + Gaussian head, built from configs in code)
trains through DistRL and GRPO on ReachPlace with rewards from the reward service."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from evolve_envs.training.checkpoint import load_checkpoint
from evolve_envs.training.driver import TrainOptions, run_train
from tests.e2e.test_train import ROOT, short_reach_place

pytest.importorskip("transformers")
TARGET = "evolve_envs.training.policies.transformer:TinyVLAPolicy"


def test_the_instruction_is_tokenised_offline_and_changes_the_action():
    from evolve_envs.training.policies.transformer import TinyVLAPolicy, build_instruction_tokenizer

    tok = build_instruction_tokenizer()
    ids = tok("pick up the red block and place it in the green zone")["input_ids"]
    assert 1 not in ids  # every word known: no [UNK]
    torch.manual_seed(0)
    pol = TinyVLAPolicy(action_dim=2, state_dim=3)
    obs = {"image": np.zeros((1, 64, 64, 3), np.uint8), "state": np.zeros((1, 3), np.float32)}
    a = pol.encode_obs({**obs, "task_description": np.array(["open the drawer"])})
    b = pol.encode_obs({**obs, "task_description": np.array(["close the drawer"])})
    mean_a = pol(pol.to_inputs(a))[0].mean
    mean_b = pol(pol.to_inputs(b))[0].mean
    assert not torch.allclose(mean_a, mean_b)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["distrl", "grpo"])
def test_distrl_and_grpo_train_the_transformer_policy(ray_local, tmp_path, algo):
    run_dir = tmp_path / algo
    res = run_train(
        TrainOptions(
            config=[str(ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place.yaml")],
            algo=algo,
            run_dir=run_dir,
            overrides=[
                *short_reach_place(algo),
                f"policy.target={TARGET}",
                "run.max_updates=3",
                "run.minutes=3",
                "run.tensorboard=false",
            ],  # fmt: skip
            progress_bar=False,
            log=io.StringIO(),
        )
    )
    assert res.counters["updates"] >= 3
    ckpt = load_checkpoint(run_dir)
    assert any(k.startswith("vision.") for k in ckpt["policy"])
    assert any(k.startswith("text.") for k in ckpt["policy"])
    assert np.isfinite(res.last_metrics["loss"])
