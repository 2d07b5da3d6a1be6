"""Our RLinf configs compose against both RLinf layouts, the documented command line runs as
written, and our hook points match the installed RLinf.

Two RLinf config trees are kept next to this file: ``rlinf_embodiment`` (RLinf 0.3.0, group
``training_backend/``) and ``rlinf_embodiment_main`` (RLinf ``main``, group ``hybrid_engines/``,
files copied unchanged with their licence header). Every shipped config composes against each
with the matching ``rlinf_layout`` and passes the installed RLinf's ``validate_cfg``.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from evolve_envs import load_config
from evolve_envs.integrations.rlinf.layout import (
    compose,
    config_uses_layout,
    installed_layout,
    with_layout,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CONFIGS = REPO / "evolve_envs" / "configs" / "rlinf"
TREES = {
    "training_backend": HERE / "rlinf_embodiment",
    "hybrid_engines": HERE / "rlinf_embodiment_main",
}
NAMES = ("libero_10_grpo_openvlaoft", "libero_10_ppo_openpi", "libero_10_ppo_openpi_api_reward")

pytest.importorskip("hydra")


def _compose(monkeypatch: pytest.MonkeyPatch, name: str, layout: str, *overrides: str):
    monkeypatch.setenv("EMBODIED_PATH", str(TREES[layout]))
    return compose(str(CONFIGS), name, [f"rlinf_layout={layout}", *overrides])


@pytest.mark.parametrize("layout", list(TREES))
@pytest.mark.parametrize("name", NAMES)
def test_every_config_composes_against_both_layouts(monkeypatch, name: str, layout: str) -> None:
    cfg = _compose(monkeypatch, name, layout)
    fsdp = cfg.actor.fsdp_config
    # the FSDP group of this layout is merged in (keys our configs do not set) ...
    assert fsdp.reshard_after_forward is True and fsdp.amp_autocast.precision == "bf16"
    # ... under our values
    assert fsdp.sharding_strategy == ("full_shard" if "grpo" in name else "no_shard")
    assert cfg.weight_syncer.type == "patch"
    assert cfg.env.train.env_type == "libero" and cfg.env.train.task_suite_name == "libero_10"
    if "grpo" in name:
        assert cfg.actor.model.model_type == "openvla_oft" and cfg.algorithm.adv_type == "grpo"
    else:
        assert cfg.actor.model.model_type == "openpi" and cfg.algorithm.adv_type == "gae"
        assert cfg.actor.model.num_action_chunks == 10 and cfg.actor.model.add_value_head


def test_composed_configs_pass_rlinf_validation(monkeypatch) -> None:
    """All six (config, layout) pairs pass the installed RLinf's ``validate_cfg`` (one Ray
    start for all: RLinf's validation starts Ray for its placement)."""
    pytest.importorskip("rlinf.config")
    from rlinf.config import validate_cfg

    from evolve_envs.integrations.rlinf.stack import check_reward_switches, enabled_block

    for name in NAMES:
        for layout in TREES:
            cfg = _compose(monkeypatch, name, layout)
            check_reward_switches(cfg)
            cfg = validate_cfg(cfg)
            assert cfg.runner.task_type == "embodied", (name, layout)
            if "grpo" in name:
                assert cfg.actor.model.precision == "bf16"  # model/openvla_oft's, kept
            block = enabled_block(cfg.env.train)
            if name.endswith("api_reward"):
                assert block is None and cfg.reward.use_reward_model
            else:
                assert block["endpoint"] == "http://127.0.0.1:8111" and block["kind"] == "progress"


def test_ppo_config_is_ppo_with_a_valid_progress_block(monkeypatch) -> None:
    cfg = _compose(monkeypatch, "libero_10_ppo_openpi", "training_backend")
    assert cfg.algorithm.loss_type == "actor_critic" and cfg.algorithm.reward_type == "chunk_level"
    train = cfg.env.train
    # the model's done may end episodes (docs/rlinf.md, "PPO")
    assert train.ignore_terminations is False and train.auto_reset is False
    block = yaml.safe_load((CONFIGS / "libero_10_ppo_openpi.yaml").read_text())["env"]["train"]
    rm = load_config({"reward_model": block["reward_model"]}, environ={}).reward_model
    assert rm.enable and rm.kind == "progress" and rm.dense_reward and rm.terminate_on_done
    # one check per action chunk: every chunk's reward is its own progress
    assert rm.start_step == rm.call_every == cfg.actor.model.num_action_chunks
    assert cfg.reward.use_reward_model is False


def test_api_reward_config_points_rlinf_at_our_chat_route(monkeypatch) -> None:
    """RLinf main's API worker route: its published requirements (``model_type: buffered_vlm``,
    ``api.api_base`` set) hold, it asks for our trend answer, and our wrapper is off."""
    cfg = _compose(monkeypatch, "libero_10_ppo_openpi_api_reward", "hybrid_engines")
    reward = cfg.reward
    assert reward.use_reward_model and reward.worker_type == "api"
    assert reward.model.model_type == "buffered_vlm" and reward.model.model_path
    assert reward.api.api_base.rstrip("/").endswith("/v1") and reward.api.model == "trend"
    assert reward.api.sampling_params.frame_orientation == "rot180"  # RLinf's LIBERO frames
    assert reward.model.reward_parser_name == "vlm_trend_reward_parser"
    window = reward.model.history_buffers.history_window
    assert list(window.history_keys) == list(reward.model.input_builder_params.video_keys)
    assert cfg.env.train.reward_model.enable is False


def test_a_tree_of_the_other_layout_names_the_switch(monkeypatch) -> None:
    with pytest.raises(ValueError, match="add rlinf_layout=hybrid_engines"):
        monkeypatch.setenv("EMBODIED_PATH", str(TREES["hybrid_engines"]))
        compose(str(CONFIGS), NAMES[0], ["rlinf_layout=training_backend"])
    with pytest.raises(ValueError, match="add rlinf_layout=training_backend"):
        monkeypatch.setenv("EMBODIED_PATH", str(TREES["training_backend"]))
        compose(str(CONFIGS), NAMES[0], ["rlinf_layout=hybrid_engines"])


def test_the_two_trees_differ_only_in_the_renamed_group() -> None:
    """What the READMEs say: ``main`` renamed ``training_backend/`` to ``hybrid_engines/`` and
    kept the other groups our configs use; the copies keep RLinf's licence header."""
    old, new = TREES["training_backend"] / "config", TREES["hybrid_engines"] / "config"
    groups = ["env/libero_10.yaml", "model/openvla_oft.yaml", "model/pi0.yaml"]
    groups.append("weight_syncer/patch_syncer.yaml")
    for group in groups:
        assert yaml.safe_load((old / group).read_text()) == yaml.safe_load(
            (new / group).read_text()
        )
    fsdp_old = yaml.safe_load((old / "training_backend" / "fsdp.yaml").read_text())
    assert yaml.safe_load((new / "hybrid_engines" / "fsdp.yaml").read_text()) == fsdp_old
    assert not (old / "hybrid_engines").exists() and not (new / "training_backend").exists()
    for path in new.rglob("*.yaml"):
        assert "Licensed under the Apache License, Version 2.0" in path.read_text(), path
    readme = (old / "README.md").read_text()
    assert "renamed that\ngroup to `hybrid_engines/`" in readme


def test_layout_follows_the_installed_rlinf_unless_named() -> None:
    pytest.importorskip("rlinf")
    installed = version("rlinf")
    expected = "training_backend" if installed.startswith("0.3") else "hybrid_engines"
    assert installed_layout() == expected
    ours = {"config_path": str(CONFIGS), "config_name": NAMES[0]}
    assert with_layout(["a=1"], **ours) == ["a=1", f"rlinf_layout={expected}"]
    assert with_layout(["rlinf_layout=hybrid_engines"], **ours) == ["rlinf_layout=hybrid_engines"]
    assert all(config_uses_layout(str(CONFIGS), name) for name in NAMES)


def test_configs_without_the_layout_group_are_left_alone(tmp_path: Path) -> None:
    """RLinf's own configs name the FSDP group directly: the launcher adds nothing to them."""
    text = (CONFIGS / "libero_10_grpo_openvlaoft.yaml").read_text()
    rlinf_style = re.sub(
        r"  - rlinf_layout: .*\n", "  - training_backend/fsdp@actor.fsdp_config\n", text
    )
    (tmp_path / "theirs.yaml").write_text(rlinf_style)
    assert not config_uses_layout(str(tmp_path), "theirs")
    assert with_layout(["a=1"], config_path=str(tmp_path), config_name="theirs") == ["a=1"]


# ------------------------------------------------------------------------------ hook points


def test_hook_points_match_the_installed_rlinf() -> None:
    """``ProgressEnvWorker`` subclasses the installed ``EnvWorker`` at the import path the
    launcher patches, and overrides ``_setup_env_and_wrappers`` with its signature; RLinf calls
    it with those keywords and builds each env by calling ``env_cls``."""
    env_worker = pytest.importorskip("rlinf.workers.env.env_worker")
    from evolve_envs.integrations.rlinf.launch import install
    from evolve_envs.integrations.rlinf.worker import ProgressEnvWorker

    assert ProgressEnvWorker.__mro__[1] is env_worker.EnvWorker
    theirs = inspect.signature(env_worker.EnvWorker._setup_env_and_wrappers)
    ours = inspect.signature(ProgressEnvWorker._setup_env_and_wrappers)
    assert list(theirs.parameters) == ["self", "env_cls", "env_cfg", "num_envs_per_stage"]
    assert list(ours.parameters) == list(theirs.parameters)
    caller = inspect.getsource(env_worker.EnvWorker)
    calls = re.findall(r"self\._setup_env_and_wrappers\((.*?)\)", caller, re.S)
    assert calls and all(
        {"env_cls=", "env_cfg=", "num_envs_per_stage="} <= set(re.findall(r"\w+=", c))
        for c in calls
    )
    body = inspect.getsource(env_worker.EnvWorker._setup_env_and_wrappers)
    assert re.search(r"env = env_cls\(", body)
    original = env_worker.EnvWorker
    try:
        assert install() is ProgressEnvWorker and env_worker.EnvWorker is ProgressEnvWorker
    finally:
        env_worker.EnvWorker = original


# ------------------------------------------------------------------- the documented commands


def _doc_commands() -> tuple[str, str]:
    """The launch command (without its ``export`` line) and the compose-step command of
    docs/rlinf.md, as written."""
    text = (REPO / "docs" / "rlinf.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text[text.index("## 4. Launch") :], re.S)
    launch = "\n".join(ln for ln in blocks[0].splitlines() if not ln.startswith("export "))
    return launch.strip(), blocks[1].strip()


def _run_doc_line(tmp_path: Path, layout: str, line: str) -> subprocess.CompletedProcess:
    embodied = tmp_path / f"embodied_{layout}"  # an RLinf checkout's examples/embodiment
    if not embodied.exists():
        embodied.mkdir()
        (embodied / "config").symlink_to(TREES[layout] / "config")
        (embodied / "train_embodied_agent.py").write_text("raise SystemExit('must not run')\n")
    env = {
        **os.environ,
        "EMBODIED_PATH": str(embodied),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    return subprocess.run(
        ["bash", "-e", "-c", line], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def test_the_documented_compose_step_runs_as_written(tmp_path: Path) -> None:
    launch, compose_step = _doc_commands()
    assert compose_step == launch + " --cfg job"  # the launch line, plus Hydra's flag
    assert "$PWD/evolve_envs/configs/rlinf" in launch
    proc = _run_doc_line(tmp_path, installed_layout(), compose_step)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["actor"]["fsdp_config"]["sharding_strategy"] == "full_shard"
    assert cfg["env"]["train"]["reward_model"]["enable"] is True


def test_the_other_layout_is_one_documented_switch_away(tmp_path: Path) -> None:
    """With the other RLinf tree at ``EMBODIED_PATH`` the documented line stops in one line that
    names the switch; with the switch it composes."""
    _, compose_step = _doc_commands()
    other = "hybrid_engines" if installed_layout() == "training_backend" else "training_backend"
    proc = _run_doc_line(tmp_path, other, compose_step)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert (
        line.startswith("rlinf_launch: the config was refused:") and f"rlinf_layout={other}" in line
    )
    proc = _run_doc_line(tmp_path, other, f"{compose_step} rlinf_layout={other}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert yaml.safe_load(proc.stdout)["actor"]["fsdp_config"]["strategy"] == "fsdp"


def test_both_reward_switches_on_is_refused_in_one_line(tmp_path: Path) -> None:
    _, compose_step = _doc_commands()
    proc = _run_doc_line(
        tmp_path, installed_layout(), f"{compose_step} reward.use_reward_model=True"
    )
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert "reward.use_reward_model" in line and "env.train.reward_model.enable" in line
    text = (REPO / "docs" / "rlinf.md").read_text()
    section = text[text.index("**One reward switch at a time.**") :]
    documented = re.search(r"```text\n(.*?)\n```", section, re.S).group(1)
    assert line == documented  # the page shows the line the launcher prints


def test_launcher_help_names_the_compose_step_and_the_switch() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "evolve_envs.integrations.rlinf.launch", "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 0
    assert "--cfg job" in proc.stdout and "rlinf_layout" in proc.stdout
    assert "--config-path $PWD/evolve_envs/configs/rlinf" in proc.stdout
