"""Subnormal floats are flushed to zero while the training loop runs, and only then."""

from __future__ import annotations

import io

import pytest
import torch

from evolve_envs.training.common.subnormal import flush_subnormals
from evolve_envs.training.distrl.algorithm import DistRL
from evolve_envs.training.driver import TrainOptions, run_train
from tests.e2e.test_train import TOY

TINY = torch.tensor([1e-39])  # subnormal in float32


def product() -> float:
    return float(TINY * 1.0)


def test_the_default_is_back_after_the_block_even_on_error() -> None:
    assert product() > 0.0
    with pytest.raises(RuntimeError), flush_subnormals() as supported:
        if not supported:
            pytest.skip("this CPU cannot flush subnormals")
        assert product() == 0.0
        raise RuntimeError("inside")
    assert product() > 0.0


class SeesSubnormals(DistRL):
    """Records, at every update, what a subnormal times one gives in the learner's process."""

    seen: list[float] = []

    def update(self, trajectories, budget_fraction):  # noqa: ANN001, ANN201
        SeesSubnormals.seen.append(product())
        return super().update(trajectories, budget_fraction)


@pytest.mark.slow
def test_the_learner_updates_with_subnormals_flushed(ray_local, tmp_path) -> None:
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormals")
    SeesSubnormals.seen.clear()
    algo = "tests.training.common.test_subnormal:SeesSubnormals"
    overrides = ["workers.num_workers=1", "run.max_updates=5"]
    run_train(TrainOptions(config=[TOY], algo=algo, run_dir=tmp_path / "run", overrides=overrides,
                           progress_bar=False, log=io.StringIO()))  # fmt: skip
    assert SeesSubnormals.seen and set(SeesSubnormals.seen) == {0.0}
    assert product() > 0.0  # the process default is back once the run is over
