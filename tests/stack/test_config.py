"""Config: YAML layering, env-var overrides, key-path errors, the stack make_env builds."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from evolve_envs import ConfigError, make_env
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.stack.loading import CONFIG_DIR, env_overrides, load_config
from evolve_envs.wrappers.episode_score import EpisodeScoreReward
from evolve_envs.wrappers.progress_reward import ProgressReward
from evolve_envs.wrappers.progressive_horizon import ProgressiveHorizon
from tests.helpers.synthetic_env import SyntheticProgressEnv

SEED_VARS = (
    "VLAC_SERVICE_URL",
    "VLAC_SERVICE_NUM",
    "VLAC_DONE_THRESHOLD",
    "VLAC_OFFSET_CALL",
    "VLAC_START_STEP_CALL",
    "USE_DENSE_REWARD",
    "USE_PROGRESSIVE_MAX_STEP",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SEED_VARS:
        monkeypatch.delenv(name, raising=False)


def wrappers_of(env: gym.Env) -> list[type]:
    out = []
    while isinstance(env, gym.Wrapper):
        out.append(type(env))
        env = env.env
    return out + [type(env)]


SUITE_FILES = sorted(CONFIG_DIR.glob("libero_*.yaml"))  # reach_place.yaml names an env.id
PRESETS = sorted((CONFIG_DIR / "presets").glob("*.yaml"))


def test_shipped_configs_exist_and_validate() -> None:
    names = {p.stem for p in SUITE_FILES}
    assert {"libero_10", "libero_spatial", "libero_object", "libero_goal", "libero_90"} <= names
    assert {p.stem for p in PRESETS} == {
        "long_horizon",
        "short_precise",
        "fast_dev",
        "robometer_libero",
    }
    for path in SUITE_FILES:
        cfg = load_config(path)
        if "id" in cfg.env:  # a non-LIBERO env by Gymnasium id (the synthetic task)
            assert cfg.env["id"].startswith("evolve_envs/")
        else:
            assert cfg.env["suite"] == path.stem
        assert cfg.reward_model.enable and cfg.reward_model.embedded


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("long_horizon", {"done_threshold": 0.95, "call_every": 16, "start_step": 64,
                          "progressive_max_step": True}),
        ("short_precise", {"done_threshold": 0.98, "call_every": 8, "start_step": 32}),
        ("fast_dev", {"call_every": 32, "service_num": 4}),
        ("robometer_libero", {"mode": "trajectory", "done_threshold": 0.65,
                              "trajectory_max_frames": 8, "reward_mode": "dense"}),
    ],
)  # fmt: skip
def test_presets_layer_on_a_suite(preset: str, expected: dict) -> None:
    cfg = load_config(CONFIG_DIR / "libero_10.yaml", CONFIG_DIR / "presets" / f"{preset}.yaml")
    for key, value in expected.items():
        assert getattr(cfg.reward_model, key) == value
    assert cfg.env["suite"] == "libero_10" and cfg.reward_model.camera == "agentview_image"


def test_env_vars_override_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLAC_DONE_THRESHOLD", "0.9")
    monkeypatch.setenv("VLAC_OFFSET_CALL", "8")
    monkeypatch.setenv("VLAC_START_STEP_CALL", "24")
    monkeypatch.setenv("USE_DENSE_REWARD", "0")
    monkeypatch.setenv("USE_PROGRESSIVE_MAX_STEP", "true")
    monkeypatch.setenv("VLAC_SERVICE_URL", "http://127.0.0.1:8111")
    monkeypatch.setenv("VLAC_SERVICE_NUM", "4")
    rm = load_config(CONFIG_DIR / "libero_10.yaml").reward_model
    assert (rm.done_threshold, rm.call_every, rm.start_step) == (0.9, 8, 24)
    assert rm.dense_reward is False and rm.reward_mode == "binary"
    assert rm.progressive_max_step is True
    assert rm.endpoint == "http://127.0.0.1:8111" and rm.service_num == 4
    # explicit overrides (make_env's reward_model=) win over environment variables
    rm = load_config(CONFIG_DIR / "libero_10.yaml", overrides={"reward_model": {"call_every": 4}})
    assert rm.reward_model.call_every == 4


def test_bad_env_var_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLAC_OFFSET_CALL", "often")
    with pytest.raises(ConfigError, match=r"VLAC_OFFSET_CALL.*reward_model\.call_every.*int"):
        env_overrides()


def test_unknown_keys_and_wrong_types_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"reward_model": {"call_every": "abc"}})
    assert str(err.value) == "reward_model.call_every: expected int, got 'abc'"
    with pytest.raises(ConfigError, match=r"reward_model\.call_evry: unknown key \(did you mean "):
        load_config({"reward_model": {"call_evry": 16}})
    with pytest.raises(ConfigError, match=r"reward_model\.done_threshold: .*fraction in \[0, 1\]"):
        load_config({"reward_model": {"done_threshold": 95}})
    with pytest.raises(ConfigError, match=r"reward_model\.mode: .*'pairwise'"):
        load_config({"reward_model": {"mode": "milestone"}})
    with pytest.raises(ConfigError, match=r"reward_model\.progressive_schedule\.stages\[1\]"):
        load_config({"reward_model": {"progressive_schedule": {"stages": [{}, {"steps": 3}]}}})
    with pytest.raises(ConfigError, match=r"^rewardmodel: unknown key"):
        load_config({"rewardmodel": {}})
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward_model:\n  enable: maybe\n")
    with pytest.raises(ConfigError, match=r"reward_model\.enable: expected bool, got 'maybe'"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_unknown_env_key_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"env\.colour: unknown key"):
        make_env(colour="red")


def test_enable_false_gives_the_plain_env() -> None:
    env = make_env(
        {"env": {"max_episode_steps": 5}, "reward_model": {"enable": False}},
        env_factory=SyntheticProgressEnv,
    )
    assert wrappers_of(env) == [gym.wrappers.TimeLimit, SyntheticProgressEnv]
    _, info = env.reset()
    assert "progress" not in info
    for _ in range(5):
        _, r, _, trunc, info = env.step(env.action_space.sample())
    assert trunc and r == 0.0
    env.close()


def test_stack_order_and_yaml_path(mock_service, tmp_path: Path) -> None:
    cfg = tmp_path / "stack.yaml"
    cfg.write_text(
        "env:\n  max_episode_steps: 6\n  scripts: [[0, 10, 20, 30, 40, 50, 60]]\n"
        f"reward_model:\n  enable: true\n  endpoint: {mock_service.url}\n"
        "  start_step: 2\n  call_every: 2\n"
    )
    env = make_env(cfg, env_factory=SyntheticProgressEnv)
    assert wrappers_of(env) == [
        ProgressReward,
        gym.wrappers.TimeLimit,
        SyntheticProgressEnv,
    ]
    env.reset()
    total = sum(env.step(env.action_space.sample())[1] for _ in range(6))
    assert total == pytest.approx(0.6)
    env.close()


def test_gym_make_with_reward_model_mapping(mock_service) -> None:
    import evolve_envs  # noqa: F401

    env = gym.make(
        "evolve_envs/LIBERO-Goal-v0",
        env_factory=SyntheticProgressEnv,
        scripts=[[0, 50, 100]],
        reward_model={"enable": True, "endpoint": mock_service.url, "start_step": 1,
                      "call_every": 1, "kind": "progress"},
    )  # fmt: skip
    _, info = env.reset()
    _, r, term, _, info = env.step(env.action_space.sample())
    assert r == pytest.approx(0.5) and info["progress"] == 50 and not term
    _, r, term, _, info = env.step(env.action_space.sample())
    assert term and info["done_by_progress"]
    env.close()


def test_reward_model_yaml_file_override(mock_service, tmp_path: Path) -> None:
    rm = tmp_path / "rm.yaml"
    rm.write_text(f"enable: true\nendpoint: {mock_service.url}\nkind: video_score\n")
    env = make_env(env_factory=SyntheticProgressEnv, max_episode_steps=3, reward_model=rm)
    assert isinstance(env, EpisodeScoreReward)
    env.close()


def test_progressive_horizon_from_config() -> None:
    env = make_env(
        {"reward_model": {"enable": False, "progressive_max_step": True,
                          "progressive_schedule": {"stages": [
                              {"fraction": 0.5}, {"fraction": 1.0, "after_episodes": 1}]}}},
        env_factory=SyntheticProgressEnv,
        max_episode_steps=8,
    )  # fmt: skip
    assert isinstance(env, ProgressiveHorizon)
    assert [s.max_steps for s in env.stages] == [4, 8]
    env.close()


def test_embedded_endpoint_starts_and_stops_a_shared_service() -> None:
    rm = {"enable": True, "endpoint": "embedded", "start_step": 1, "call_every": 1,
          "embedded_backend_kwargs": {"rule": "intensity"}}  # fmt: skip
    kwargs = {"env_factory": SyntheticProgressEnv, "scripts": [[0, 40]], "max_episode_steps": 2}
    own = make_env(reward_model=rm, **kwargs)  # starts its own service, stops it in close()
    owned = own.reward_model.service
    assert owned.is_running()
    own.close()
    assert not owned.is_running()
    with EmbeddedService("mock", {"rule": "intensity"}) as svc:  # shared explicitly
        a = make_env(reward_model=rm, embedded_service=svc, **kwargs)
        b = make_env(reward_model=rm, embedded_service=svc, **kwargs)
        assert a.reward_model.service is None and b.reward_model.service is None
        a.reset()
        assert a.step(a.action_space.sample())[1] == pytest.approx(0.4)
        a.close()
        assert svc.is_running()  # b still uses it; its owner stops it
        b.reset()
        assert b.step(b.action_space.sample())[1] == pytest.approx(0.4)
        b.close()
        assert svc.is_running()
    assert not svc.is_running()


@pytest.mark.parametrize(
    ("dense", "binary", "reward_mode"),
    [(True, False, "dense"), (False, False, "sparse"), (False, True, "binary")],
)
def test_tracker_config_carries_every_key(dense: bool, binary: bool, reward_mode: str) -> None:
    """Each tracker setting comes from the block key of the same name (non-default values)."""
    from evolve_envs.progress.tracker_config import TrackerConfig

    block = {
        "mode": "trajectory", "start_step": 3, "call_every": 7, "milestone_every": 21,
        "negative_rule": "robodopamine", "done_threshold": 0.8, "done_comparison": ">",
        "done_by": "either", "terminate_on_done": False, "success_threshold": 0.7,
        "reward_coef": 2.0, "use_rel_reward": True, "calls": "async", "max_lag_steps": 5,
        "check_at_episode_end": True, "trajectory_max_frames": 9, "failure_warn_fraction": 0.3,
        "last_check": "before_limit", "max_unsettled_episodes": 2, "answer_timeout_s": 5.0,
        "dense_reward": dense, "binary_reward": binary,
    }  # fmt: skip
    settings = load_config({"reward_model": block}, environ={}).reward_model.tracker_config()
    defaults = TrackerConfig()
    for name in TrackerConfig.model_fields:
        want = reward_mode if name == "reward_mode" else block[name]
        assert getattr(settings, name) == want, name
        if name != "reward_mode" or reward_mode != "dense":
            assert getattr(defaults, name) != want, f"{name}: pick a non-default value"


def test_robometer_preset_ends_on_two_of_three_checks() -> None:
    cfg = load_config(
        CONFIG_DIR / "libero_spatial.yaml", CONFIG_DIR / "presets" / "robometer_libero.yaml"
    )
    settings = cfg.reward_model.tracker_config()
    assert settings.done_by.rule().describe() == "2_of_3" and settings.done_threshold == 0.65
