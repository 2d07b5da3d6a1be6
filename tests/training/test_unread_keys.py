"""Each algorithm owns its settings: a key the chosen algorithm does not read is refused.

``lr``, ``entropy_coef``, ``max_grad_norm``, ... exist in both ``learner`` (DistRL) and ``grpo``;
set by a mapping or an override in ``learner`` under ``algo: grpo``, the value would be ignored,
so it is a one-line ``ConfigError`` naming the key to set. The shipped configs carry both blocks
for the ``--algo`` switch and still load under either algorithm."""

from __future__ import annotations

import importlib.resources

import pytest

import evolve_envs
from evolve_envs import ConfigError, load_train_config
from evolve_envs.training.config import TWIN_KEYS, TrainConfig
from evolve_envs.training.driver import TrainOptions, effective_config


def test_learner_lr_under_grpo_is_refused_naming_grpo_lr() -> None:
    with pytest.raises(ConfigError) as err:
        load_train_config("reach_place", {"algo": "grpo", "learner": {"lr": 1e-3}})
    assert str(err.value) == "learner.lr: not read under algo: grpo (set grpo.lr)"
    with pytest.raises(ConfigError, match=r"learner\.entropy_coef: .* \(set grpo\.entropy_coef\)"):
        load_train_config("reach_place", overrides=["algo=grpo", "learner.entropy_coef=0.01"])
    with pytest.raises(ConfigError, match=r"^learner\.max_grad_norm: .*; learner\.clip: "):
        load_train_config({"algo": "grpo", "learner": {"clip": 0.1, "max_grad_norm": 0.5}})


def test_the_python_and_cli_entries_refuse_it_before_anything_starts(tmp_path, capsys) -> None:
    from evolve_envs.cli.main import main

    with pytest.raises(ConfigError, match=r"set grpo\.lr"):
        evolve_envs.train("reach_place", run_dir=tmp_path / "a", algo="grpo", learner={"lr": 1e-3})
    with pytest.raises(ConfigError, match=r"set grpo\.lr"):
        effective_config(TrainOptions(["reach_place"], algo="grpo", overrides=["learner.lr=1e-3"]))
    argv = ["train", "--config", "reach_place", "--algo", "grpo", "--run-dir", str(tmp_path / "b")]
    assert main([*argv, "learner.lr=1e-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "set grpo.lr" in err, err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_key_the_algorithm_reads_and_shared_settings_are_taken() -> None:
    cfg = load_train_config("reach_place", {"algo": "grpo", "grpo": {"lr": 1e-3}})
    assert cfg.grpo.lr == 1e-3
    # placement and batch keys of `learner` are shared with GRPO's runs (the 2x2 switch)
    shared = ["algo=grpo", "learner.num_gpus=0", "learner.min_buffer=2", "learner.queue_size=8"]
    assert load_train_config("reach_place", overrides=shared).learner.queue_size == 8
    assert load_train_config("reach_place", {"learner": {"lr": 1e-3}}).learner.lr == 1e-3
    # GRPO's block set ahead of an --algo grpo switch (tuning spaces do) stays allowed
    assert load_train_config("reach_place", overrides=["grpo.lr=1e-3"]).grpo.lr == 1e-3
    assert set(TWIN_KEYS) >= {"lr", "entropy_coef", "max_grad_norm"}


def test_shipped_configs_switch_algorithms_and_stored_configs_load_back() -> None:
    shipped = importlib.resources.files("evolve_envs.configs").joinpath("distrl")
    names = sorted(p.name.removesuffix(".yaml") for p in shipped.iterdir() if p.is_file())
    assert "reach_place_async" in names
    for name in names:
        for algo in ("distrl", "grpo"):
            cfg, _ = effective_config(TrainOptions([name], algo=algo))
            assert cfg.algo == algo
            again = load_train_config(cfg.stored())  # a checkpoint's or a policy file's config
            assert again.learner == cfg.learner and again.grpo == cfg.grpo
    grpo = TrainConfig(algo="grpo", learner={"lr": 5e-4})
    assert load_train_config(grpo).learner.lr == 5e-4  # a TrainConfig is a whole config


def test_a_recording_under_deferred_calls_is_refused_not_rewritten() -> None:
    overrides = {"reward_model": {"enable": True, "calls": "deferred"}, "record": {"dir": "r"}}
    with pytest.raises(ConfigError, match="record: .*calls: deferred"):
        load_train_config("reach_place", overrides)
    cfg = load_train_config(
        "reach_place", {"reward_model": {"calls": "async"}, "record": {"dir": "r"}}
    )
    assert cfg.stack(0).reward_model.calls == "async"
