"""Opening a saved policy or a checkpoint runs nobody's code.

A run's policies are safetensors files with a JSON header (no pickle); its resume state is plain
data read with ``torch.load(weights_only=True)``. A ``.pt`` whose pickle would build arbitrary
objects (a shared ``best.pt`` calling ``os.system``) is refused by ``load_policy``, ``evolve-envs
evaluate`` and ``--resume`` unless trusted, and nothing in it runs; trusted, an older file
still loads."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import evolve_envs
from evolve_envs.training.checkpoint import (
    UntrustedCheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from evolve_envs.training.config import TrainConfig
from evolve_envs.training.driver import TrainOptions, effective_config
from evolve_envs.training.evaluation import make_eval_env
from evolve_envs.training.policy_file import (
    HEADER_KEY,
    read_policy_file,
    save_policy_file,
    space_from_json,
    space_to_json,
)
from evolve_envs.training.worker_env import policy_from_config

CFG = TrainConfig(
    env={"id": "evolve_envs/ReachPlace-v0", "max_episode_steps": 4},
    reward_model={"enable": False},
    policy={"image_size": 16, "hidden": 16},
)


class RunsCode:
    """What a hostile pickle holds: unpickling it calls ``os.system``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _policy_and_spaces(seed: int = 0):
    env = make_eval_env(CFG)
    try:
        torch.manual_seed(seed)
        net = policy_from_config(CFG.policy, env.observation_space, env.action_space)
        obs, info = env.reset(seed=3)
        return net, env.observation_space, env.action_space, (obs, info)
    finally:
        env.close()


def _hostile(path: Path, marker: Path) -> Path:
    net, *_ = _policy_and_spaces()
    payload = {"policy": net.state_dict(), "config": CFG.stored(), "hook": RunsCode(marker)}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, path)
    return path


def _old_style(path: Path) -> dict[str, torch.Tensor]:
    """A ``best.pt`` / ``checkpoint.pt`` as evolve-envs wrote them before policy files: a full
    pickle (the replay's NumPy arrays need more than the weights-only reader takes)."""
    net, *_ = _policy_and_spaces(seed=1)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    payload = {
        "policy": state,
        "config": CFG.stored(),
        "algo": "distrl",
        "counters": {"updates": 5, "version": 5},
        "replay": {"priorities": np.ones(4), "live": np.zeros(4, dtype=bool)},
        "eval": {"updates": 5, "success": 0.5},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, path)
    return state


def test_a_hostile_best_pt_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run = tmp_path / "shared"
    _hostile(run / "best.pt", marker)
    for source in (run, run / "best.pt"):
        with pytest.raises(UntrustedCheckpointError, match="--trust-checkpoint"):
            evolve_envs.load_policy(source)
    with pytest.raises(UntrustedCheckpointError):
        evolve_envs.load_policy(run, best=True)
    assert not marker.exists()


def test_evaluate_refuses_a_hostile_pt_in_one_line(tmp_path: Path, capsys) -> None:
    from evolve_envs.cli.main import main

    marker = tmp_path / "ran"
    path = _hostile(tmp_path / "shared" / "best.pt", marker)
    assert main(["evaluate", str(path), "--videos", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--trust-checkpoint" in err, err
    assert not marker.exists()


def test_resume_refuses_a_hostile_checkpoint_unless_trusted(tmp_path: Path, capsys) -> None:
    from evolve_envs.cli.main import main

    marker = tmp_path / "ran"
    run = tmp_path / "run"
    _hostile(run / "checkpoint.pt", marker)
    with pytest.raises(UntrustedCheckpointError, match="--trust-checkpoint"):
        effective_config(TrainOptions(resume=run))
    with pytest.raises(UntrustedCheckpointError):
        evolve_envs.train(resume=run)
    assert main(["train", "--resume", str(run), "--no-progress-bar"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--trust-checkpoint" in err, err
    assert not marker.exists()


def test_trust_checkpoint_needs_resume(capsys) -> None:
    from evolve_envs.cli.main import main

    assert main(["train", "--config", "reach_place", "--trust-checkpoint"]) == 2
    assert "give --resume" in capsys.readouterr().err


def test_an_old_pt_loads_when_trusted(tmp_path: Path, capsys) -> None:
    run = tmp_path / "old"
    state = _old_style(run / "best.pt")
    with pytest.raises(UntrustedCheckpointError):
        evolve_envs.load_policy(run)
    capsys.readouterr()
    policy = evolve_envs.load_policy(run, trust=True)
    assert "warning" in capsys.readouterr().err
    assert policy.path == run / "best.pt" and policy.counters == {"updates": 5, "version": 5}
    for key, value in policy.policy.state_dict().items():
        assert torch.equal(value, state[key]), key
    _old_style(run / "checkpoint.pt")
    assert load_checkpoint(run, trust=True)["counters"]["updates"] == 5
    cfg, resumed = effective_config(TrainOptions(resume=run, trust_checkpoint=True))
    assert resumed is not None and cfg.algo == "distrl"


def test_a_policy_file_holds_no_pickle_and_round_trips(tmp_path, monkeypatch) -> None:
    net, obs_space, act_space, (obs, info) = _policy_and_spaces()
    info_json = {"config": CFG.stored(), "algo": "grpo", "counters": {"updates": 7}}
    path = save_policy_file(tmp_path / "best.safetensors", net.state_dict(), info_json,
                            obs_space, act_space)  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.safetensors"]
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])  # safetensors: a JSON header, then raw tensor bytes
    header = json.loads(raw[8 : 8 + size])
    meta = json.loads(header["__metadata__"][HEADER_KEY])
    assert meta["algo"] == "grpo" and meta["observation_space"]["type"] == "Dict"
    assert not raw.startswith(b"\x80") and not raw.startswith(b"PK")  # no pickle, no torch zip

    # load_policy builds no env: the file carries the spaces
    import evolve_envs.training.evaluation as evaluation

    def no_env(*args, **kwargs):
        raise AssertionError("load_policy built an env")

    monkeypatch.setattr(evaluation, "make_eval_env", no_env)
    loaded = evolve_envs.load_policy(path)
    monkeypatch.undo()
    assert loaded.counters == {"updates": 7} and loaded.config.algo == CFG.algo
    for key, value in net.state_dict().items():
        assert torch.equal(value, loaded.policy.state_dict()[key]), key
    net.eval()
    expected = evolve_envs.TrainedPolicy(net, CFG, path, {}).act(obs, info)
    assert np.array_equal(loaded.act(obs, info), expected)
    env = loaded.make_env()  # still builds the env when asked
    try:
        assert env.action_space == act_space
    finally:
        env.close()


def test_spaces_of_the_envs_survive_strict_json() -> None:
    env = make_eval_env(CFG)
    try:
        for space in (env.observation_space, env.action_space):
            text = json.dumps(space_to_json(space), allow_nan=False)
            assert space_from_json(json.loads(text)) == space
    finally:
        env.close()


def test_a_run_dir_prefers_its_policy_files(tmp_path: Path) -> None:
    net, obs_space, act_space, _ = _policy_and_spaces()
    info = {"config": CFG.stored(), "algo": "distrl", "counters": {"updates": 2}}
    save_policy_file(tmp_path / "policy.safetensors", net.state_dict(), info, obs_space, act_space)
    _hostile(tmp_path / "checkpoint.pt", tmp_path / "ran")  # never opened for the policy
    assert evolve_envs.load_policy(tmp_path).path.name == "policy.safetensors"
    with pytest.raises(FileNotFoundError, match="best.safetensors"):
        evolve_envs.load_policy(tmp_path, best=True)
    assert read_policy_file(tmp_path / "policy.safetensors").counters == {"updates": 2}
    assert not (tmp_path / "ran").exists()


def test_resume_state_is_plain_data(tmp_path: Path) -> None:
    net, *_ = _policy_and_spaces()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    sum(p.square().sum() for p in net.parameters()).backward()
    opt.step()  # Adam's moments and step counts: the optimizer state a checkpoint holds
    rng = np.random.default_rng(0)
    payload = {
        "policy": net.state_dict(),
        "optimizer": opt.state_dict(),
        "counters": {"updates": np.int64(3)},
        "replay": {"priorities": np.arange(4.0), "live": np.ones(4, dtype=bool)},
        "rng": rng.bit_generator.state,
        "config": CFG.stored(),
    }
    save_checkpoint(tmp_path, payload)
    torch.load(tmp_path / "checkpoint.pt", weights_only=True)  # the weights-only reader takes it
    back = load_checkpoint(tmp_path)
    assert back["counters"]["updates"] == 3 and back["rng"] == rng.bit_generator.state
    assert torch.equal(back["replay"]["priorities"], torch.arange(4.0, dtype=torch.float64))
    opt.load_state_dict(back["optimizer"])
