"""One reward switch at a time, and our ``reward_model`` block is never RLinf's.

RLinf's world-model env configs (``env/wan_libero_*.yaml``, ``env/opensora_libero_*.yaml``) keep
their reward network under ``env.*.reward_model`` with ``type`` and ``from_pretrained``; ours has
``enable`` / ``kind``. RLinf's own reward worker is ``reward.use_reward_model``.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from evolve_envs import ConfigError
from evolve_envs.integrations.rlinf.adapter import wrap_env_from_config
from evolve_envs.integrations.rlinf.stack import (
    check_reward_switches,
    enabled_block,
    reward_model_block,
)
from tests.integrations.rlinf.standin_env import StandinLiberoEnv, standin_cfg

#: RLinf main's env/wan_libero_spatial.yaml block, with its interpolation resolved.
WORLD_MODEL_BLOCK = {"type": "ResnetRewModel", "from_pretrained": "/ckpt/wan/resnet_rm.pth"}


def _cfg(use_reward_model: bool, ours: dict | None) -> object:
    train = {**standin_cfg(), **({"reward_model": ours} if ours is not None else {})}
    return OmegaConf.create(
        {"reward": {"use_reward_model": use_reward_model}, "env": {"train": train}}
    )


def test_both_switches_on_is_refused_in_one_line_naming_both_keys() -> None:
    with pytest.raises(ConfigError) as err:
        check_reward_switches(_cfg(True, {"enable": True, "endpoint": "http://127.0.0.1:1"}))
    message = str(err.value)
    assert "\n" not in message
    assert "reward.use_reward_model" in message and "env.train.reward_model.enable" in message


@pytest.mark.parametrize(
    ("rlinf_on", "ours"),
    [
        (True, None),  # RLinf's reward worker alone (the API route)
        (True, {"enable": False}),  # ours written out but off
        (True, WORLD_MODEL_BLOCK),  # RLinf's world-model block is not ours
        (False, {"enable": True}),  # ours alone
    ],
)
def test_one_switch_on_is_accepted(rlinf_on: bool, ours: dict | None) -> None:
    check_reward_switches(_cfg(rlinf_on, ours))


def test_rlinf_world_model_block_is_left_to_rlinf() -> None:
    env_cfg = OmegaConf.create({**standin_cfg(), "reward_model": WORLD_MODEL_BLOCK})
    assert reward_model_block(env_cfg) is None and enabled_block(env_cfg) is None
    inner = StandinLiberoEnv(env_cfg, num_envs=1)
    assert wrap_env_from_config(inner, env_cfg) is inner  # not wrapped, not validated as ours
    ours = OmegaConf.create({**standin_cfg(), "reward_model": {"kind": "progress"}})
    assert reward_model_block(ours) is not None and enabled_block(ours) is None


def test_a_block_mixing_rlinf_and_our_keys_is_refused_in_one_line() -> None:
    mixed = OmegaConf.create({"reward_model": {**WORLD_MODEL_BLOCK, "enable": True}})
    with pytest.raises(
        ConfigError, match=r"^env\.eval\.reward_model: mixes RLinf's world-model"
    ) as err:
        reward_model_block(mixed, "env.eval")
    assert "type, from_pretrained" in str(err.value) and "(enable)" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="expected a mapping"):
        reward_model_block({"reward_model": "reward.yaml"})


def test_the_env_worker_refuses_both_switches_before_building_envs() -> None:
    """``ProgressEnvWorker`` checks the switches where RLinf builds its envs (for launch scripts
    that do not go through our launcher)."""
    pytest.importorskip("rlinf.workers.env.env_worker")
    from evolve_envs.integrations.rlinf.worker import ProgressEnvWorker

    worker = ProgressEnvWorker.__new__(ProgressEnvWorker)  # no Ray actor: only the check runs
    worker.cfg = _cfg(True, {"enable": True})
    built = []
    with pytest.raises(ConfigError, match="both true"):
        worker._setup_env_and_wrappers(lambda **kw: built.append(kw), worker.cfg.env.train, 1)
    assert built == []
