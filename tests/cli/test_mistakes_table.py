"""Every expected mistake through every command that takes it: one line on stderr naming the
cause (and the fix), the documented exit status (docs/getting-started.md, "Exit statuses"), and
not one file written. The commands run in-process from an empty folder (so a default output
folder such as ``runs/...`` would show), against a real dead port where a service is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve_envs.cli.main import main
from tests.helpers.svc_helpers import free_port

USAGE, SERVICE = 2, 3
DEAD = f"http://127.0.0.1:{free_port()}"  # nobody listens there
RULE = "reward_model.embedded_backend_kwargs.rule=reachplace"
BAD_RULE = "unknown mock rule 'reachplace' (did you mean 'reach_place'?); rules: intensity, change"


def _shipped() -> str:
    from evolve_envs.recording.shipped import resolve_recording

    return str(resolve_recording("shipped"))


#: (id, argv, exit status, what the line says). ``{shipped}`` is the package's recordings.
TABLE = [
    # a misspelt mock rule, wherever a rule is named
    ("rule-calibrate", ["calibrate", "shipped", "--service", "mock:reachplace"], USAGE, BAD_RULE),
    ("rule-relabel", ["relabel", "{shipped}", "--service", "mock:reachplace"], USAGE, BAD_RULE),
    ("rule-rollout", ["rollout", "--config", "reach_place", RULE], USAGE, BAD_RULE),
    ("rule-train", ["train", "--config", "reach_place", RULE], USAGE, BAD_RULE),
    # 'embedded' misspelt is not a host name
    (
        "embeded-rollout",
        ["rollout", "--config", "reach_place", "reward_model.endpoint=embeded"],
        USAGE,
        "unknown endpoint 'embeded' (did you mean 'embedded'?)",
    ),
    (
        "embeded-train",
        ["train", "--config", "reach_place", "reward_model.endpoint=embeded"],
        USAGE,
        "unknown endpoint 'embeded' (did you mean 'embedded'?)",
    ),
    # done_threshold is a fraction while progress is 0-100 elsewhere
    (
        "threshold-rollout",
        ["rollout", "--config", "reach_place", "reward_model.done_threshold=95"],
        USAGE,
        "expected a fraction in [0, 1] (0.95 is 95 % progress",
    ),
    (
        "threshold-train",
        ["train", "--config", "reach_place", "reward_model.done_threshold=95"],
        USAGE,
        "(did you mean 0.95?)",
    ),
    (
        "threshold-calibrate",
        ["calibrate", "shipped", "--service", "mock:reach_place", "--threshold", "95"],
        USAGE,
        "--threshold is a fraction in [0, 1], got 95",
    ),
    # a config name or path that is not there, from any folder: the list and a did-you-mean
    (
        "config-rollout",
        ["rollout", "--config", "evolve_envs/configs/reach_plce.yaml"],
        USAGE,
        "(did you mean 'reach_place'?)",
    ),
    (
        "config-train",
        ["train", "--config", "evolve_envs/configs/distrl/reach_plce.yaml"],
        USAGE,
        "training configs: libero_10, libero_object_finetune, libero_smoke, reach_place, "
        "reach_place_async, "
        "reach_place_fitted, reach_place_sync, reach_place_tuned",
    ),
    # a policy that cannot be imported says how to name one
    (
        "policy-module",
        ["rollout", "--config", "reach_place", "--policy", "mypol:act"],
        USAGE,
        "in the current folder, or a file path such as ./mypol.py:function",
    ),
    (
        "policy-file",
        ["rollout", "--config", "reach_place", "--policy", "./nope.py:act"],
        USAGE,
        "no file 'nope.py'",
    ),
    # a dead service named by URL: the hint names the option that named it
    (
        "dead-calibrate",
        ["calibrate", "shipped", "--service", DEAD],
        SERVICE,
        "is the service running and reachable from here? (--service)",
    ),
    (
        "dead-relabel",
        ["relabel", "{shipped}", "--service", DEAD],
        SERVICE,
        "is the service running and reachable from here? (--service)",
    ),
    (
        "dead-rollout",
        ["rollout", "--config", "reach_place", f"reward_model.endpoint={DEAD}"],
        SERVICE,
        "(reward_model.endpoint / VLAC_SERVICE_URL)",
    ),
    # a run folder that holds a run, and two options that contradict each other
    (
        "run-dir-taken",
        ["train", "--config", "reach_place", "--run-dir", "taken"],
        USAGE,
        "holds a run (checkpoint.pt); give --resume taken to continue it or --overwrite",
    ),
    (
        "resume-and-overwrite",
        ["train", "--resume", "taken", "--overwrite"],
        USAGE,
        "--resume continues the run in its folder; --overwrite replaces it: not both",
    ),
]


def _files(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("argv", "status", "says"), [r[1:] for r in TABLE], ids=[r[0] for r in TABLE]
)
def test_a_mistake_is_one_line_with_its_status_and_nothing_written(
    argv, status, says, tmp_path, monkeypatch, capfd
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVOLVE_ENVS_DEBUG", raising=False)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "checkpoint.pt").write_bytes(b"an earlier run's")
    before = _files(tmp_path)
    argv = [a.replace("{shipped}", _shipped()) for a in argv]
    rc = main(argv)
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith(f"evolve-envs {argv[0]}: error: "), err
    assert says in err[0], err
    assert rc == status, err
    assert _files(tmp_path) == before  # not one file written or touched


def test_the_table_covers_every_command_that_takes_a_rule_a_config_or_a_service():
    commands = {(r[0].split("-")[0], r[1][0]) for r in TABLE}
    for mistake, takers in {
        "rule": ("calibrate", "relabel", "rollout", "train"),
        "embeded": ("rollout", "train"),
        "threshold": ("rollout", "train", "calibrate"),
        "config": ("rollout", "train"),
        "dead": ("calibrate", "relabel", "rollout"),
    }.items():
        assert {(mistake, t) for t in takers} <= commands, mistake
    assert len(TABLE) >= 12


def test_what_the_mistakes_were_reaching_for_works_from_any_folder(tmp_path, monkeypatch):
    """The right spelling of each: a checkout's config path from another folder, a policy module
    in the current folder or given as a file."""
    from evolve_envs import load_config, load_train_config
    from evolve_envs.cli.rollout_policy import resolve_policy

    monkeypatch.chdir(tmp_path)
    assert load_train_config("evolve_envs/configs/distrl/reach_place.yaml").algo == "distrl"
    assert (
        load_config("../evolve_envs/configs/reach_place.yaml").env["id"].endswith("ReachPlace-v0")
    )
    (tmp_path / "mypol_here.py").write_text("def act(obs):\n    return 'here'\n")
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", ".")])
    assert resolve_policy("mypol_here:act")(None) == "here"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pol_file.py").write_text("def act(obs):\n    return 'file'\n")
    assert resolve_policy("sub/pol_file.py:act")(None) == "file"
