"""A run reads its config and its checkpoint once: what the caller checked is not read again."""

from __future__ import annotations

import io

import pytest

from evolve_envs.training import driver
from tests.helpers.toy_env import ENV_ID

TOY = {
    "env": {"id": ENV_ID, "length": 6},
    "reward_model": {"enable": False},
    "workers": {"num_workers": 1, "num_envs": 2, "num_cpus": 0.01},
    "policy": {"image_size": 16, "hidden": 16},
    "distrl": {"min_buffer": 4, "batch_size": 4},
    "run": {"max_updates": 1, "log_every_s": 1, "tensorboard": False},
}


@pytest.mark.slow
def test_a_checked_config_is_not_read_again(ray_local, tmp_path, monkeypatch) -> None:
    opts = driver.TrainOptions(
        config=[TOY], run_dir=tmp_path / "run", progress_bar=False, log=io.StringIO()
    )
    checked = driver.effective_config(opts)

    def read_again(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run read its config or checkpoint a second time")

    monkeypatch.setattr(driver, "load_train_config", read_again)
    monkeypatch.setattr(driver, "load_checkpoint", read_again)
    result = driver.run_train(opts, checked)
    assert result.counters["updates"] == 1 and result.checkpoint.is_file()
    with pytest.raises(AssertionError, match="a second time"):  # unchecked: it reads
        driver.run_train(opts)
