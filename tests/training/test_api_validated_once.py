"""``evolve_envs.train(...)`` alone runs a short ReachPlace training (its own local Ray), and the
run's ``reward_model`` block is validated once in this process: loaded typed, it reaches the
workers, the embedded service and the reward client as the same checked object."""

from __future__ import annotations

import io
import sys

import pytest
import yaml

import evolve_envs
from evolve_envs.stack.config import ProgressModelConfig, RewardModelConfig

SHORT = {
    "workers": {"num_workers": 1, "num_envs": 1, "num_cpus": 0.01},
    "env": {"max_episode_steps": 10},
    "distrl": {"min_buffer": 2, "batch_size": 2},
    "run": {"max_updates": 2, "log_every_s": 2, "tensorboard": False},
    "reward_model": {"token": "s3cret"},
}


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kinds of the reward-model blocks validated in this process (copies not counted)."""
    seen: list[str] = []
    create = RewardModelConfig.__new__

    def counting_new(cls: type, *args: object, **values: object) -> RewardModelConfig:
        if sys._getframe(1).f_code.co_name not in ("__copy__", "__deepcopy__"):
            seen.append(cls.__name__)
        return create(cls, *args, **values)

    monkeypatch.setattr(RewardModelConfig, "__new__", counting_new)
    return seen


def test_the_counter_sees_every_validation(validations) -> None:
    cfg = evolve_envs.load_config({"reward_model": {"enable": True}})
    cfg.reward_model.model_copy(update={"endpoint": "http://h:1"})
    ProgressModelConfig.model_validate({"call_every": 3})
    assert validations == ["ProgressModelConfig", "ProgressModelConfig"]


@pytest.mark.slow
def test_a_short_run_validates_the_reward_model_once(validations, tmp_path) -> None:
    log = io.StringIO()
    result = evolve_envs.train("distrl/reach_place", run_dir=tmp_path / "rp", log=log, **SHORT)
    assert result.counters["updates"] == 2 and result.checkpoint.is_file()
    assert validations == ["ProgressModelConfig"]  # once, where load_train_config read it
    stored = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    assert (
        stored["reward_model"]["endpoint"] == "embedded" and "token" not in stored["reward_model"]
    )
    assert "s3cret" not in (result.run_dir / "summary.json").read_text()
