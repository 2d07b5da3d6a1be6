"""``evolve_envs/configs/rlinf/libero_10_grpo_openvlaoft.yaml`` composes against RLinf 0.3.0's
config tree.

RLinf's launch script composes our config with Hydra, with RLinf's example config directory on
the search path (``EMBODIED_PATH``). The pip package does not ship that directory, so the groups
our defaults list names live next to this file (``rlinf_embodiment/config``, RLinf 0.3.0's keys
and defaults). ``test_rlinf_layouts.py`` composes every shipped config against both RLinf layouts
and runs RLinf's own ``validate_cfg`` on them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EMBODIED = Path(__file__).resolve().parent / "rlinf_embodiment"


@pytest.fixture()
def composed(monkeypatch):
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir

    monkeypatch.setenv("EMBODIED_PATH", str(EMBODIED))
    with initialize_config_dir(
        config_dir=str(REPO / "evolve_envs" / "configs" / "rlinf"), version_base="1.1"
    ):
        return compose(config_name="libero_10_grpo_openvlaoft")


def test_config_composes_against_rlinf_0_3_tree(composed):
    cfg = composed
    # Group defaults merged in, our values on top.
    assert cfg.actor.fsdp_config.sharding_strategy == "full_shard"  # training_backend/fsdp
    assert cfg.actor.fsdp_config.gradient_checkpointing is True  # ours
    assert cfg.actor.model.num_action_chunks == 8  # model/openvla_oft
    assert cfg.actor.model.max_prompt_length == 128  # ours
    assert cfg.weight_syncer.type == "patch"
    assert cfg.env.train.env_type == "libero" and cfg.env.eval.env_type == "libero"
    assert cfg.env.train.group_size == cfg.algorithm.group_size
    assert cfg.env.train.reward_model.enable is True
    assert "reward_model" not in cfg.env.eval


def test_rlinf_extra_pins_hold_and_rlinf_training_modules_import():
    """The ``rlinf`` extra's pins are what is installed, and with them the modules RLinf's
    embodied launch imports load (with transformers 5 the FSDP model manager fails on
    ``AutoModelForVision2Seq``)."""
    pytest.importorskip("rlinf")
    import configparser
    import importlib
    from importlib.metadata import version

    from packaging.requirements import Requirement

    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    lines = parser["options.extras_require"]["rlinf"].split("\n")
    reqs = [Requirement(line) for line in lines if line.strip()]
    assert {r.name for r in reqs} >= {"rlinf", "transformers", "protobuf", "datasets"}
    for req in reqs:
        installed = version(req.name)
        assert req.specifier.contains(installed, prereleases=True), (req, installed)
    for module in (
        "rlinf.hybrid_engines.fsdp.fsdp_model_manager",
        "rlinf.workers.actor.fsdp_actor_worker",
        "rlinf.workers.rollout.hf.huggingface_worker",
        "rlinf.runners.embodied_runner",
    ):
        importlib.import_module(module)


def test_cpu_check_reads_the_hydra_command_line():
    from evolve_envs.integrations.rlinf.env_check import EnvCheckReport, parse_hydra_args

    assert parse_hydra_args(["--config-path", "/c", "--config-name=x", "a.b=1", "c=2"]) == (
        "/c",
        "x",
        ["a.b=1", "c=2"],
    )
    assert parse_hydra_args(["-cp=/c", "-cn", "x"]) == ("/c", "x", [])
    with pytest.raises(SystemExit, match="needs a value"):
        parse_hydra_args(["--config-name"])
    with pytest.raises(SystemExit, match="--multirun"):
        parse_hydra_args(["--multirun"])
    text = EnvCheckReport("EnvGroup", 1, [["A", "B"]], "openvla_oft", "/models/x").message()
    assert "stopped before the actor and rollout workers" in text
    assert "A > B" in text and "'/models/x'" in text and "not run" in text


def test_reward_model_options_shown_commented_out_are_valid():
    """The done rule and the alarm block that the config shows commented out load as written
    once uncommented (so their key names cannot drift from the schema)."""
    import re

    import yaml

    from evolve_envs import load_config

    lines = (
        (REPO / "evolve_envs" / "configs" / "rlinf" / "libero_10_grpo_openvlaoft.yaml")
        .read_text()
        .splitlines()
    )
    start = lines.index("    reward_model:")
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"^ {0,4}\S", lines[i]))
    option = re.compile(r"^( {6})# ( *[a-z_]+:(?: .*)?)$")  # a commented-out key, not prose
    block = [option.sub(r"\1\2", line) for line in lines[start:end]]
    uncommented = sum(a != b for a, b in zip(block, lines[start:end], strict=True))
    assert uncommented == 10  # done_by and the alarm block's 9 lines
    values = yaml.safe_load("\n".join(block))["reward_model"]
    cfg = load_config({"reward_model": values}, environ={}).reward_model
    assert (cfg.done_by.kind, cfg.done_by.k, cfg.done_by.n) == ("k_of_n", 2, 3)
    assert cfg.alarm.enable and cfg.alarm.window == 20 and cfg.alarm.score == "final"
    settings = {k: v for k, v in values["alarm"].items() if k != "enable"}
    assert cfg.alarm.detector_settings() == settings
