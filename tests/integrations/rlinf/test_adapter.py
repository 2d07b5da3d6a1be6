"""RLinfProgressReward over an RLinf-shaped vector env, against the real mock reward server.

Frames are painted so the mock backend's *intensity* rule reads back the stand-in env's progress
exactly; with a check at every step (incremental mode) the dense model reward at step t is
(p_t - p_{t-1}) / 100, which the tests predict.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from evolve_envs import ConfigError, load_config
from evolve_envs.integrations.rlinf.adapter import RLinfProgressReward, wrap_env_from_config
from evolve_envs.integrations.rlinf.stack import build_progress_stack
from evolve_envs.progress.tracker import ProgressTracker
from evolve_envs.progress.tracker_config import TrackerConfig
from evolve_envs.reward.clients.progress_client import ProgressClient
from tests.integrations.rlinf.standin_env import StandinLiberoEnv, grey, standin_cfg

REPO = Path(__file__).resolve().parents[3]

EVERY_STEP = TrackerConfig(
    mode="incremental", start_step=1, call_every=1, done_threshold=0.95, reward_mode="dense"
)


def wrap(client, n=3, settings=EVERY_STEP, **cfg) -> RLinfProgressReward:
    inner = StandinLiberoEnv(standin_cfg(**cfg), num_envs=n)
    return RLinfProgressReward(inner, lambda i: ProgressTracker(client, settings))


def chunk(per_env: list[list[float]]) -> torch.Tensor:
    """Actions [N, C, 7] whose first component moves progress by 10 * value per step."""
    a = torch.zeros((len(per_env), len(per_env[0]), 7))
    a[:, :, 0] = torch.tensor(per_env, dtype=torch.float32)
    return a


def image_levels(images: torch.Tensor) -> list[int]:
    return [int(images[i, 0, 0, 0]) for i in range(images.shape[0])]


# ----------------------------------------------------------------------------- shapes, rewards


def test_chunk_step_shapes_types_and_exact_dense_rewards(client):
    env = wrap(client, n=3)
    obs, infos = env.reset()
    assert set(obs) == {"main_images", "wrist_images", "states", "task_descriptions"}
    obs_list, rewards, terms, truncs, infos_list = env.chunk_step(
        chunk([[1.0] * 4, [0.5] * 4, [0.0] * 4])
    )
    assert len(obs_list) == 4 and len(infos_list) == 4
    assert rewards.shape == (3, 4) and rewards.dtype == torch.float32
    assert terms.shape == (3, 4) and terms.dtype == torch.bool
    assert truncs.shape == (3, 4) and truncs.dtype == torch.bool
    assert obs_list[-1]["main_images"].dtype == torch.uint8
    assert obs_list[-1]["task_descriptions"] == env.task_descriptions
    expected = torch.tensor([[0.1] * 4, [0.05] * 4, [0.0] * 4])
    torch.testing.assert_close(rewards, expected, atol=1e-6, rtol=0)
    assert not terms.any() and not truncs.any()
    for t, infos in enumerate(infos_list):
        torch.testing.assert_close(
            infos["progress"], torch.tensor([10.0 * (t + 1), 5.0 * (t + 1), 0.0]), atol=1e-4, rtol=0
        )
        assert infos["env_reward"].shape == (3,)
        assert infos["reward_model_reward"].shape == (3,)
        assert infos["episode"]["reward_model_calls"].tolist() == [t + 1] * 3
    env.close()


def test_env_reward_mix_weights(client):
    # success_at 20: the stand-in's LIBERO-style reward pays reward_coef 5 at the success step.
    inner = StandinLiberoEnv(standin_cfg(success_at=20), num_envs=2)
    env = RLinfProgressReward(
        inner,
        lambda i: ProgressTracker(client, EVERY_STEP),
        reward_weight=2.0,
        env_reward_weight=1.0,
    )
    env.reset()
    _, rewards, terms, _, infos_list = env.chunk_step(chunk([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    # env 0: model 0.1, 0.1 (x2) and the env's 5.0 at step 2, where the env terminates.
    torch.testing.assert_close(rewards[0], torch.tensor([0.2, 5.2, 0.0]), atol=1e-5, rtol=0)
    assert terms[0].tolist() == [False, True, True]
    assert infos_list[1]["env_reward"][0].item() == 5.0
    env.close()


def test_rlinf_episode_return_is_the_trained_reward(client):
    """RLinf logs ``infos["episode"]["return"]`` as ``env/return``: it must be the sum of the
    rewards the wrapper returns (up to the episode's end), not the env's own reward."""
    inner = StandinLiberoEnv(standin_cfg(success_at=20), num_envs=2)
    env = RLinfProgressReward(
        inner,
        lambda i: ProgressTracker(client, EVERY_STEP),
        reward_weight=2.0,
        env_reward_weight=1.0,
    )
    env.reset()
    _, rewards, terms, _, infos_list = env.chunk_step(chunk([[1.0, 1.0, 0.0], [0.5, 0.5, 0.5]]))
    ep = infos_list[-1]["episode"]
    # env 0 ends at step 2 (0.2 + 5.2); step 3 comes after its end and is not counted.
    assert ep["return"].tolist() == pytest.approx([5.4, 0.3], abs=1e-5)
    assert ep["reward"].tolist() == pytest.approx([5.4 / 2, 0.3 / 3], abs=1e-5)
    assert ep["env_return"].tolist() == pytest.approx([5.0, 0.0])
    assert ep["return"][1].item() == pytest.approx(rewards[1].sum().item(), abs=1e-5)
    assert infos_list[0]["episode"]["return"].tolist() == pytest.approx([0.2, 0.1], abs=1e-5)
    env.close()

    # Auto-reset: the ended episode's block in final_info carries its trained return.
    env = wrap(client, n=2, auto_reset=True, success_at=101, max_episode_steps=3)
    env.reset()
    _, rewards, _, truncs, infos_list = env.chunk_step(chunk([[1.0] * 3, [0.5] * 3]))
    assert truncs[:, -1].all()
    final = infos_list[-1]["final_info"]["episode"]
    assert final["return"].tolist() == pytest.approx([0.3, 0.15], abs=1e-5)
    assert final["env_return"].tolist() == pytest.approx([0.0, 0.0])
    env.close()


# ----------------------------------------------------------------------------- termination


def test_progress_termination_without_auto_reset(client):
    # Simulator never succeeds (success_at 101); the reward model ends env 0 at progress 100
    # (step 10 = chunk 2, action 1), env 1 reaches only 60.
    env = wrap(client, n=2, success_at=101, max_episode_steps=100)
    env.reset()
    all_r, all_t = [], []
    for _ in range(3):
        _, r, te, tr, infos_list = env.chunk_step(chunk([[1.0] * 4, [0.5] * 4]))
        all_r.append(r)
        all_t.append(te)
    rewards = torch.cat(all_r, dim=1)
    terms = torch.cat(all_t, dim=1)
    assert terms[0].nonzero().flatten().tolist() == [9]  # step 10 only
    assert not terms[1].any()
    assert rewards[0, :10].sum().item() == pytest.approx(1.0, abs=1e-5)
    assert (rewards[0, 10:] == 0).all()
    assert rewards[1].sum().item() == pytest.approx(0.6, abs=1e-5)
    assert infos_list[-1]["done_by_progress"].tolist() == [True, False]
    ep = infos_list[-1]["episode"]
    assert ep["reward_model_calls"].tolist() == [10, 12]  # no calls after the episode ended
    assert ep["progress"].tolist() == pytest.approx([100.0, 60.0], abs=1e-4)
    assert ep["reward_model_return"].tolist() == pytest.approx([1.0, 0.6], abs=1e-5)
    env.close()


def actions_for_merge_case() -> list[torch.Tensor]:
    # env 0: +10 every step -> 100 at step 10: the simulator (success_at 100) ends it.
    # env 1: +10 x9, +5 at step 10 -> 95: only the reward model ends it (done_threshold 0.95).
    # env 2: idle.
    env1 = [1.0] * 9 + [0.5, 0.0, 0.0]
    return [chunk([[1.0] * 4, env1[k * 4 : (k + 1) * 4], [0.0] * 4]) for k in range(3)]


def test_auto_reset_resets_progress_ended_envs_and_keeps_final_observations(client):
    env = wrap(client, n=3, auto_reset=True, success_at=100, max_episode_steps=100)
    env.reset()
    inner = env.env
    outs = [env.chunk_step(a) for a in actions_for_merge_case()]
    obs_list, rewards, terms, truncs, infos_list = outs[2]
    # RLinf reports ends on the chunk's last action under auto-reset.
    assert terms[:, :3].sum() == 0
    assert terms[:, 3].tolist() == [True, True, False]
    torch.testing.assert_close(rewards[0], torch.tensor([0.1, 0.1, 0.0, 0.0]), atol=1e-5, rtol=0)
    torch.testing.assert_close(rewards[1], torch.tensor([0.1, 0.05, 0.0, 0.0]), atol=1e-5, rtol=0)
    last = infos_list[-1]
    assert np.asarray(last["_final_observation"]).tolist() == [True, True, False]
    # Terminal frames: env 0's from the env's own reset, env 1's from ours.
    assert image_levels(last["final_observation"]["main_images"])[:2] == [grey(100), grey(95)]
    assert image_levels(obs_list[-1]["main_images"]) == [grey(0)] * 3
    fin = last["final_info"]["episode"]
    assert fin["progress"].tolist()[:2] == pytest.approx([100.0, 95.0], abs=1e-4)
    assert fin["done_by_progress"].tolist()[:2] == [True, True]
    assert [1] in inner.reset_calls  # env 1 was reset through the env's auto-reset routine
    # The next chunk starts fresh episodes: no progress leaks across the reset.
    _, rewards, terms, _, infos_list = env.chunk_step(chunk([[1.0] * 4, [1.0] * 4, [0.0] * 4]))
    torch.testing.assert_close(rewards[:2], torch.full((2, 4), 0.1), atol=1e-5, rtol=0)
    assert infos_list[-1]["progress"].tolist() == pytest.approx([40.0, 40.0, 0.0], abs=1e-4)
    assert infos_list[-1]["episode"]["reward_model_calls"].tolist()[:2] == [4, 4]
    env.close()


def test_auto_reset_resets_an_env_only_the_model_ended(client):
    """No env ended in the chunk: the wrapper resets the model-ended sub-env through the env's
    reset (fresh reset state ids, as the env's own auto-reset draws them) and fills
    ``final_observation`` / ``final_info`` itself."""
    env = wrap(client, n=2, auto_reset=True, success_at=101, max_episode_steps=100)
    env.reset()
    inner = env.env
    env0 = [1.0] * 9 + [0.5, 0.0, 0.0]  # 95 at step 10: the reward model ends it
    outs = [env.chunk_step(chunk([env0[k * 4 : (k + 1) * 4], [0.0] * 4])) for k in range(3)]
    obs_list, _, terms, truncs, infos_list = outs[2]
    assert terms[:, 3].tolist() == [True, False] and terms[:, :3].sum() == 0 and not truncs.any()
    last = infos_list[-1]
    for key in ("_final_observation", "_final_info", "_elapsed_steps"):
        assert np.asarray(last[key]).tolist() == [True, False]
    assert image_levels(last["final_observation"]["main_images"]) == [grey(95), grey(0)]
    assert image_levels(obs_list[-1]["main_images"]) == [grey(0), grey(0)]
    fin = last["final_info"]["episode"]
    assert fin["done_by_progress"].tolist() == [True, False]
    assert fin["model_done"].tolist() == [True, False]
    assert fin["progress"].tolist() == pytest.approx([95.0, 0.0], abs=1e-4)
    assert inner.reset_calls[-1] == [0] and inner.update_reset_state_ids_calls == 1
    assert obs_list[-1]["task_descriptions"] == inner.task_descriptions
    _, rewards, _, _, infos_list = env.chunk_step(chunk([[1.0] * 4, [0.0] * 4]))
    torch.testing.assert_close(rewards[0], torch.full((4,), 0.1), atol=1e-5, rtol=0)
    assert infos_list[-1]["progress"].tolist() == pytest.approx([40.0, 0.0], abs=1e-4)
    env.close()


def test_auto_reset_on_truncation_restarts_trackers(client):
    env = wrap(client, n=2, auto_reset=True, success_at=101, max_episode_steps=6)
    env.reset()
    _, r1, _, tr1, _ = env.chunk_step(chunk([[1.0] * 4, [0.5] * 4]))
    _, r2, te2, tr2, infos_list = env.chunk_step(chunk([[1.0] * 4, [0.5] * 4]))
    assert tr2[:, 3].all() and not te2.any()
    # Steps 5-6 belong to the old episode, 7-8 the env ran on past its truncation before the
    # chunk-end reset (as RLinf's LiberoEnv does); the tracker scores all of them.
    torch.testing.assert_close(torch.cat([r1, r2], 1)[0], torch.full((8,), 0.1), atol=1e-5, rtol=0)
    fin = infos_list[-1]["final_info"]["episode"]
    assert fin["progress"].tolist() == pytest.approx([80.0, 40.0], abs=1e-4)
    _, r3, _, _, infos_list = env.chunk_step(chunk([[1.0] * 4, [0.5] * 4]))
    torch.testing.assert_close(r3[0], torch.full((4,), 0.1), atol=1e-5, rtol=0)
    assert infos_list[0]["progress"].tolist() == pytest.approx([10.0, 5.0], abs=1e-4)
    env.close()


def test_ignore_terminations_reports_but_never_terminates(client):
    env = wrap(client, n=2, ignore_terminations=True, success_at=50, max_episode_steps=12)
    env.reset()
    outs = [env.chunk_step(chunk([[1.0] * 4, [0.5] * 4])) for _ in range(3)]
    terms = torch.cat([o[2] for o in outs], 1)
    truncs = torch.cat([o[3] for o in outs], 1)
    rewards = torch.cat([o[1] for o in outs], 1)
    assert not terms.any()
    assert truncs[:, -1].all() and truncs[:, :-1].sum() == 0
    assert outs[2][4][0]["done_by_progress"].tolist() == [False, False]  # step 9
    assert outs[2][4][1]["done_by_progress"].tolist() == [True, False]  # step 10
    assert rewards[0].sum().item() == pytest.approx(1.0, abs=1e-5)
    assert rewards[1].sum().item() == pytest.approx(0.6, abs=1e-5)
    env.close()


def test_single_step_api_with_auto_reset(client):
    env = wrap(client, n=2, auto_reset=True, success_at=101, max_episode_steps=3)
    env.reset()
    rewards = []
    for _ in range(4):
        obs, r, te, tr, infos = env.step(torch.tensor([[1.0] + [0.0] * 6, [0.5] + [0.0] * 6]))
        assert r.shape == (2,) and te.shape == (2,) and tr.shape == (2,)
        rewards.append(r)
    assert tr.tolist() == [False, False]
    torch.testing.assert_close(torch.stack(rewards)[:, 0], torch.full((4,), 0.1), atol=1e-5, rtol=0)
    assert infos["progress"].tolist() == pytest.approx([10.0, 5.0], abs=1e-4)
    env.close()


def test_partial_reset_restarts_only_those_trackers(client):
    env = wrap(client, n=2, success_at=101)
    env.reset()
    env.chunk_step(chunk([[1.0] * 2, [1.0] * 2]))
    env.reset(env_idx=np.array([1]), reset_state_ids=np.array([3]))
    _, rewards, _, _, infos_list = env.chunk_step(chunk([[1.0] * 2, [1.0] * 2]))
    assert infos_list[-1]["progress"].tolist() == pytest.approx([40.0, 20.0], abs=1e-4)
    torch.testing.assert_close(rewards, torch.full((2, 2), 0.1), atol=1e-5, rtol=0)
    env.close()


def test_dead_service_falls_back_without_crashing():
    dead = ProgressClient("http://127.0.0.1:9", max_workers=2)  # discard port: refused
    env = wrap(dead, n=2)
    env.reset()
    _, rewards, terms, _, infos_list = env.chunk_step(chunk([[1.0] * 3, [1.0] * 3]))
    assert (rewards == 0).all() and not terms.any()
    assert (infos_list[-1]["episode"]["reward_model_errors"] >= 1).all()
    env.close()
    dead.close()


# ----------------------------------------------------------------------------- forwarding


def test_forwards_what_rlinf_touches(client):
    env = wrap(client, n=4, group_size=2)
    inner = env.env
    assert env.is_start is True
    env.is_start = False
    assert inner.is_start is False
    env.is_start = True
    env.reset()
    assert inner.is_start is False
    before = inner.update_reset_state_ids_calls
    env.update_reset_state_ids()
    assert inner.update_reset_state_ids_calls == before + 1
    ids = env.reset_state_ids
    assert ids is inner.reset_state_ids and ids[0] == ids[1] and ids[2] == ids[3]
    env.flush_video()
    assert inner.flush_video_calls == 1
    assert env.seed == inner.seed and env.num_envs == 4 and env.group_size == 2
    assert env.get_wrapper_attr("elapsed_steps") is inner.elapsed_steps
    assert env.unwrapped is inner
    assert env.auto_reset is False and env.ignore_terminations is False
    with pytest.raises(AttributeError):
        env.no_such_attribute  # noqa: B018
    env.close()


def test_other_attributes_are_reached_through_get_wrapper_attr(client):
    """Only what RLinf reads is forwarded by name; RLinf's ``get_env_attr`` (``offload``)
    walks down the stack, and a name no env has is ``AttributeError`` (``get_env_attr``'s
    default)."""
    from rlinf.envs.utils import get_env_attr

    env = wrap(client, n=2)
    inner = env.env
    assert not hasattr(env, "progress") and not hasattr(env, "offload")
    assert env.get_wrapper_attr("progress") is inner.progress
    assert get_env_attr(env, "offload") is None
    inner.offload = lambda: "offloaded"
    assert get_env_attr(env, "offload")() == "offloaded"
    assert get_env_attr(env, "flush_video") == env.flush_video
    assert env.metadata is inner.metadata and env.cfg is inner.cfg
    assert not hasattr(env, "capture_image")  # the stand-in has none: RecordVideo uses obs
    with pytest.raises(AttributeError, match="no_such_attribute"):
        env.get_wrapper_attr("no_such_attribute")
    env.close()


def test_auto_reset_evaluation_env_must_not_be_ended_by_the_model(client):
    inner = StandinLiberoEnv(standin_cfg(auto_reset=True), num_envs=2)
    inner.is_eval = True  # RLinf's evaluation envs draw their reset states themselves
    with pytest.raises(ConfigError, match="terminate_on_done"):
        RLinfProgressReward(inner, lambda i: ProgressTracker(client, EVERY_STEP))
    RLinfProgressReward(
        inner, lambda i: ProgressTracker(client, EVERY_STEP), model_terminates=False
    ).close()


def test_auto_reset_env_without_reset_routine_is_refused(client):
    class NoRoutine:
        num_envs = 2
        auto_reset = True
        ignore_terminations = False

    with pytest.raises(ConfigError, match="terminate_on_done"):
        RLinfProgressReward(NoRoutine(), lambda i: ProgressTracker(client, EVERY_STEP))


# ----------------------------------------------------------------------------- config


def block(url: str, **kw):
    return {
        "enable": True,
        "endpoint": url,
        "mode": "incremental",
        "start_step": 1,
        "call_every": 1,
        **kw,
    }


def test_from_config_with_omegaconf_block(mock_service):
    env_cfg = OmegaConf.create({**standin_cfg(), "reward_model": block(mock_service.url)})
    inner = StandinLiberoEnv(env_cfg, num_envs=2)
    env = wrap_env_from_config(inner, env_cfg)
    assert isinstance(env, RLinfProgressReward) and env.env is inner
    env.reset()
    _, rewards, _, _, _ = env.chunk_step(chunk([[1.0] * 2, [0.5] * 2]))
    torch.testing.assert_close(rewards, torch.tensor([[0.1, 0.1], [0.05, 0.05]]), atol=1e-5, rtol=0)
    env.close()
    disabled = OmegaConf.create({**standin_cfg(), "reward_model": {"enable": False}})
    assert wrap_env_from_config(inner, disabled) is inner
    assert wrap_env_from_config(inner, OmegaConf.create(standin_cfg())) is inner


def test_config_errors_name_the_key(mock_service):
    with pytest.raises(ConfigError, match="reward_model.call_evry: unknown key"):
        build_progress_stack(block(mock_service.url, call_evry=3), 2)
    with pytest.raises(ConfigError, match="reward_model.kind"):
        build_progress_stack(block(mock_service.url, kind="video_score"), 2)
    with pytest.raises(ConfigError, match="enable"):
        build_progress_stack({"enable": False}, 2)
    # deferred is refused where a model done resets sub-envs: the env's future waits on it
    resets = StandinLiberoEnv(standin_cfg(auto_reset=True), num_envs=2)
    with pytest.raises(ConfigError, match=r"calls: 'deferred' with env auto_reset: true needs"):
        RLinfProgressReward.from_config(resets, block(mock_service.url, calls="deferred"))
    quiet = block(mock_service.url, calls="deferred", terminate_on_done=False)
    RLinfProgressReward.from_config(resets, quiet).close()


def test_block_from_a_yaml_path(mock_service, tmp_path):
    """A YAML path works, holding the block itself or a config with a ``reward_model:`` key."""
    alone = tmp_path / "block.yaml"
    alone.write_text(yaml.safe_dump(block(mock_service.url, call_every=3)))
    nested = tmp_path / "config.yaml"
    nested.write_text(yaml.safe_dump({"reward_model": block(mock_service.url, call_every=5)}))
    for path, every in ((alone, 3), (nested, 5)):
        stack = build_progress_stack(str(path), 2)
        try:
            assert stack.trackers[0].settings.call_every == every
        finally:
            for fn in stack.on_close:
                fn()


def test_env_variables_override_the_block(mock_service):
    stack = build_progress_stack(
        block(mock_service.url), 2, environ={"VLAC_OFFSET_CALL": "4", "VLAC_DONE_THRESHOLD": "0.9"}
    )
    try:
        assert stack.trackers[0].settings.call_every == 4
        assert stack.trackers[0].settings.done_threshold == 0.9
    finally:
        for fn in stack.on_close:
            fn()


def test_example_yaml_mirrors_rlinf_and_validates():
    path = REPO / "evolve_envs" / "configs" / "rlinf" / "libero_10_grpo_openvlaoft.yaml"
    cfg = yaml.safe_load(path.read_text())
    assert cfg["algorithm"]["adv_type"] == "grpo"
    assert cfg["env"]["train"]["auto_reset"] is False
    rm = cfg["env"]["train"]["reward_model"]
    parsed = load_config({"reward_model": rm}, environ={}).reward_model
    assert parsed.enable and parsed.kind == "progress"
    lo, hi = cfg["algorithm"]["rewards_lower_bound"], cfg["algorithm"]["rewards_upper_bound"]
    assert 0.0 <= lo < hi <= parsed.reward_weight * parsed.reward_coef


# ----------------------------------------------------------------------------- real RLinf


def test_real_rlinf_env_worker_installs_the_wrapper(mock_service, tmp_path):
    """RLinf's own EnvWorker code path and RecordVideo wrapper (where ``rlinf`` is installed)."""
    pytest.importorskip("rlinf.workers.env.env_worker")
    from rlinf.envs.utils import get_env_attr
    from rlinf.envs.wrappers import RecordVideo

    from evolve_envs.integrations.rlinf.worker import ProgressEnvWorker as worker_cls

    worker = worker_cls.__new__(worker_cls)  # no Ray cluster: set what the method reads
    worker.stage_num, worker._rank, worker._world_size, worker._worker_info = 1, 0, 1, None
    worker.cfg = OmegaConf.create({"env": {}})
    env_cfg = OmegaConf.create(
        {
            **standin_cfg(auto_reset=True, success_at=101, max_episode_steps=100),
            "video_cfg": {
                "save_video": True,
                "info_on_video": False,
                "video_base_dir": str(tmp_path),
            },
            "reward_model": block(mock_service.url),
        }
    )
    (env,) = worker._setup_env_and_wrappers(
        env_cls=StandinLiberoEnv, env_cfg=env_cfg, num_envs_per_stage=2
    )
    assert isinstance(env, RecordVideo) and isinstance(env.env, RLinfProgressReward)
    env.is_start = True
    obs, _ = env.reset()
    _, rewards, _, _, infos_list = env.chunk_step(chunk([[1.0] * 3, [0.5] * 3]))
    torch.testing.assert_close(rewards, torch.tensor([[0.1] * 3, [0.05] * 3]), atol=1e-5, rtol=0)
    assert infos_list[-1]["progress"].tolist() == pytest.approx([30.0, 15.0], abs=1e-4)
    assert callable(get_env_attr(env, "flush_video"))
    env.update_reset_state_ids()
    env.flush_video()
    env.close()
    env.env.close()
    assert list(tmp_path.rglob("*.mp4"))
    disabled = OmegaConf.create({**standin_cfg(), "video_cfg": {"save_video": False}})
    (plain,) = worker._setup_env_and_wrappers(StandinLiberoEnv, disabled, 2)
    assert isinstance(plain, StandinLiberoEnv)


def test_launcher_runs_a_script_with_the_progress_worker(tmp_path, capsys, monkeypatch):
    """``rlinf_launch`` swaps RLinf's EnvWorker name before the script imports it."""
    pytest.importorskip("rlinf.workers.env.env_worker")
    from evolve_envs.integrations.rlinf import launch as rlinf_launch

    monkeypatch.setattr(rlinf_launch, "_cuda_available", lambda: True)  # a GPU node runs the script

    script = tmp_path / "train.py"
    script.write_text(
        "import sys\n"
        "from rlinf.workers.env.env_worker import EnvWorker\n"
        "print(EnvWorker.__name__, sys.argv[1:])\n"
    )
    import rlinf.workers.env.env_worker as module

    original = module.EnvWorker
    try:
        rlinf_launch.main([str(script), "--config-name", "x"])
    finally:
        module.EnvWorker = original
    assert capsys.readouterr().out.strip() == "ProgressEnvWorker ['--config-name', 'x']"


# ----------------------------------------------------------------------------- threads


@pytest.mark.parametrize("calls", ["sync", "async"])
def test_one_thread_pool_per_call_mode(mock_service, calls):
    """Sync trackers are stepped on the wrapper's threads and call the client there; async
    trackers only submit to the client's workers, so the wrapper starts no threads of its own."""
    import threading

    settings = EVERY_STEP.replace(calls=calls, max_lag_steps=0)  # async: applied at its step
    before = set(threading.enumerate())
    with ProgressClient(mock_service.url) as client:
        env = wrap(client, n=3, settings=settings)
        env.reset()
        _, rewards, _, _, _ = env.chunk_step(chunk([[1.0] * 2, [0.5] * 2, [0.0] * 2]))
        names = {t.name.rsplit("_", 1)[0] for t in set(threading.enumerate()) - before}
        env.close()
    torch.testing.assert_close(rewards.sum(dim=1), torch.tensor([0.2, 0.1, 0.0]), atol=1e-5, rtol=0)
    assert ("progress" in names) == (calls == "sync")  # the wrapper's pool
    assert ("progress-client" in names) == (calls == "async")  # the client's workers


def test_a_service_killed_mid_run_is_counted_and_said_once(caplog):
    """The same failure policy as ``evolve-envs train``: the episodes that got fallback rewards
    are counted in the episode block (RLinf logs it as ``env/reward_model_fallback_episodes``)
    and the first one logs a warning."""
    import logging
    import os
    import signal

    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    svc = EmbeddedService("mock", {"rule": "intensity", "latency_ms": 0}).start()
    client = ProgressClient(svc.url, max_workers=2, timeout=2)
    env = None
    try:
        env = wrap(client, n=2, max_episode_steps=4)
        env.reset()
        _, _, _, _, infos_list = env.chunk_step(chunk([[1.0] * 2, [1.0] * 2]))
        assert (infos_list[-1]["episode"]["reward_model_fallback_episodes"] == 0).all()
        os.kill(svc.pid, signal.SIGKILL)
        svc.stop()
        with caplog.at_level(logging.WARNING):
            _, rewards, _, truncs, infos_list = env.chunk_step(chunk([[1.0] * 2, [1.0] * 2]))
        assert truncs[:, -1].all()  # both episodes ended, scored in part by the fallback
        assert (rewards == 0).all()
        assert (infos_list[-1]["episode"]["reward_model_fallback_episodes"] == 2).all()
        warned = [r for r in caplog.records if "the reward service is failing" in r.getMessage()]
        assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    finally:
        if env is not None:
            env.close()
        client.close()
        svc.stop()
