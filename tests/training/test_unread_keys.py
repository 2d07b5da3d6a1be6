"""Each algorithm owns its settings: ``distrl:`` (DistRLConfig) under ``algo: distrl``, ``grpo:``
(GRPOConfig) under ``algo: grpo``; ``learner:`` says where the learner runs, for either.

A key set on top of the config (a later mapping, a keyword, an override) in the block the
chosen algorithm does not read is a one-line ``ConfigError`` naming the key to set; DistRL's old
keys under ``learner:`` are refused by name. The shipped configs carry both blocks for the
``--algo`` switch and still load under either algorithm; the resolved config holds the chosen
block only, and is frozen."""

from __future__ import annotations

import importlib.resources

import pydantic
import pytest

import evolve_envs
from evolve_envs import ConfigError, load_train_config
from evolve_envs.training.config import TrainConfig, read_stored
from evolve_envs.training.distrl.config import DistRLConfig
from evolve_envs.training.driver import TrainOptions, effective_config
from evolve_envs.training.grpo.config import GRPOConfig


def test_distrl_lr_under_grpo_is_refused_naming_grpo_lr() -> None:
    with pytest.raises(ConfigError) as err:
        load_train_config("reach_place", {"algo": "grpo", "distrl": {"lr": 1e-3}})
    assert str(err.value) == "distrl.lr: not read under algo: grpo (set grpo.lr)"
    with pytest.raises(ConfigError, match=r"distrl\.entropy_coef: .* \(set grpo\.entropy_coef\)"):
        load_train_config("reach_place", overrides=["algo=grpo", "distrl.entropy_coef=0.01"])
    with pytest.raises(ConfigError, match=r"^distrl\.clip: .*; distrl\.barrier: not read .*distrl"):
        load_train_config({}, {"algo": "grpo", "distrl": {"clip": 0.1, "barrier": True}})
    # and the other way round: GRPO's keys are not read by DistRL
    with pytest.raises(ConfigError) as err:
        load_train_config("reach_place", overrides=["grpo.group_size=8"])
    assert str(err.value) == "grpo.group_size: not read under algo: distrl (read under algo: grpo)"
    with pytest.raises(ConfigError, match=r"^grpo\.lr: not read under algo: distrl \(set distrl"):
        load_train_config("reach_place", {"grpo": {"lr": 1e-3}})


def test_distrl_keys_under_learner_are_refused_by_their_new_name() -> None:
    with pytest.raises(ConfigError) as err:
        load_train_config("reach_place", overrides=["learner.barrier=true"])
    assert (
        str(err.value) == "learner.barrier: DistRL settings are under distrl: (set distrl.barrier)"
    )
    with pytest.raises(ConfigError, match=r"^learner\.lr: .*\(set grpo\.lr\)$"):
        load_train_config("reach_place", {"algo": "grpo", "learner": {"lr": 1e-3}})
    with pytest.raises(ConfigError, match=r"^learner\.lr: .*; learner\.max_sample_ratio: "):
        load_train_config({"learner": {"lr": 1e-3, "max_sample_ratio": 8, "num_gpus": 0}})


def test_the_python_and_cli_entries_refuse_it_before_anything_starts(tmp_path, capsys) -> None:
    from evolve_envs.cli.main import main

    with pytest.raises(ConfigError, match=r"set grpo\.lr"):
        evolve_envs.train("reach_place", run_dir=tmp_path / "a", algo="grpo", distrl={"lr": 1e-3})
    with pytest.raises(ConfigError, match=r"set grpo\.lr"):
        effective_config(TrainOptions(["reach_place"], algo="grpo", overrides=["distrl.lr=1e-3"]))
    argv = ["train", "--config", "reach_place", "--algo", "grpo", "--run-dir", str(tmp_path / "b")]
    assert main([*argv, "distrl.lr=1e-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "set grpo.lr" in err, err
    assert main([*argv[:4], "distrl", *argv[5:], "learner.lr=1e-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "set distrl.lr" in err, err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_config_itself_may_carry_both_blocks_for_the_algo_switch() -> None:
    both = {"distrl": {"lr": 2e-3}, "grpo": {"lr": 5e-4}}  # as the shipped files do
    assert load_train_config(both).distrl.lr == 2e-3
    cfg = load_train_config(both, overrides=["algo=grpo"])
    assert cfg.grpo.lr == 5e-4 and cfg.distrl is None


def test_the_chosen_block_and_the_placement_are_taken() -> None:
    cfg = load_train_config("reach_place", {"algo": "grpo", "grpo": {"lr": 1e-3}})
    assert cfg.grpo is not None and cfg.grpo.lr == 1e-3 and cfg.distrl is None
    # where the learner runs is every algorithm's
    shared = ["algo=grpo", "learner.num_gpus=0", "learner.queue_size=8"]
    assert load_train_config("reach_place", overrides=shared).learner.queue_size == 8
    cfg = load_train_config("reach_place", {"distrl": {"lr": 1e-3}})
    assert cfg.distrl is not None and cfg.distrl.lr == 1e-3 and cfg.grpo is None
    assert isinstance(cfg.distrl, DistRLConfig)
    assert isinstance(load_train_config("reach_place", overrides=["algo=grpo"]).grpo, GRPOConfig)


def test_the_resolved_config_is_frozen() -> None:
    cfg = load_train_config("reach_place")
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        cfg.run.seed = 3  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        cfg.distrl.lr = 1.0  # type: ignore[misc,union-attr]
    assert cfg.model_copy(update={"algo": "x"}).algo == "x" and cfg.algo == "distrl"


def test_shipped_configs_switch_algorithms_and_stored_configs_load_back() -> None:
    shipped = importlib.resources.files("evolve_envs.configs").joinpath("distrl")
    names = sorted(p.name.removesuffix(".yaml") for p in shipped.iterdir() if p.is_file())
    assert "reach_place_async" in names
    for name in names:
        for algo in ("distrl", "grpo"):
            cfg, _ = effective_config(TrainOptions([name], algo=algo))
            assert cfg.algo == algo
            again = load_train_config(cfg.stored())  # a checkpoint's or a policy file's config
            assert (again.distrl, again.grpo, again.learner) == (cfg.distrl, cfg.grpo, cfg.learner)
    grpo = TrainConfig(algo="grpo", grpo={"lr": 5e-4})
    assert load_train_config(grpo).grpo.lr == 5e-4  # a TrainConfig is a whole config


def test_a_config_stored_before_the_split_is_read_in_todays_layout(tmp_path) -> None:
    """A run's own record (config.yaml, a checkpoint's config) written with DistRL's settings
    under ``learner:`` is read back as it ran: those settings under ``distrl:``."""
    old = {"algo": "distrl", "learner": {"lr": 2e-3, "barrier": True, "num_gpus": 0.0,
                                         "queue_size": 16}, "grpo": {"lr": 3e-4}}  # fmt: skip
    cfg = load_train_config(read_stored(old))
    assert (cfg.distrl.lr, cfg.distrl.barrier, cfg.learner.queue_size) == (2e-3, True, 16)
    assert cfg.grpo is None
    path = tmp_path / "config.yaml"
    path.write_text("algo: grpo\nlearner: {lr: 0.002, num_gpus: 0.0}\ngrpo: {lr: 0.001}\n")
    cfg = load_train_config(read_stored(path))
    assert cfg.grpo.lr == 1e-3 and cfg.distrl is None  # a grpo run never read DistRL's copy
    assert read_stored(cfg.stored()) == cfg.stored()  # today's layout passes unchanged


def test_a_recording_under_deferred_calls_is_refused_not_rewritten() -> None:
    overrides = {"reward_model": {"enable": True, "calls": "deferred"}, "record": {"dir": "r"}}
    with pytest.raises(ConfigError, match="record: .*calls: deferred"):
        load_train_config("reach_place", overrides)
    cfg = load_train_config(
        "reach_place", {"reward_model": {"calls": "async"}, "record": {"dir": "r"}}
    )
    assert cfg.stack(0).reward_model.calls == "async"
