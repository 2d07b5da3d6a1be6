"""``evolve-envs relabel``: a reward model's judgement of every episode, as new per-frame columns
(``reward_model.<label>.*``) of a copy of the dataset; resumable (docs/RECORDING.md).

Usage (shell)::

    evolve-envs relabel runs/rec-lerobot --service http://gpu-1:8111 --every-frame
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.cli.errors import CliError, ExitStatus

if TYPE_CHECKING:
    from pydantic import JsonValue

    from evolve_envs.progress.tracker import ProgressTracker
    from evolve_envs.recording.episodes import RecordedEpisode
    from evolve_envs.reward.protocol.wire import Capabilities
    from evolve_envs.stack.config import RewardModelConfig

__all__ = ["RelabelOptions", "add_parser", "relabel", "run"]

IDENTITY = ("backend", "model_id", "revision", "config_hash")


@dataclass
class RelabelOptions:
    """What ``evolve-envs relabel`` takes (the options are described in docs/RECORDING.md).

    >>> opts = RelabelOptions("runs/ds", "mock:reach_place", every_frame=True)
    >>> opts.out is None, opts.label is None  # default: DATASET-<backend>, label <backend>
    (True, True)
    """

    dataset: str
    service: str
    out: str | None = None
    config: list[str] = field(default_factory=list)
    call_every: int | None = None
    start_step: int | None = None
    every_frame: bool = False
    mode: str | None = None
    label: str | None = None
    camera: str | None = None
    orientation: str | None = None
    token: str | None = None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or "model"


def _identity(caps: Capabilities | None) -> dict[str, str]:
    if caps is None:
        raise CliError(
            "the reward service did not say who it is (/capabilities unreadable)",
            ExitStatus.SERVICE,
        )
    return {
        "backend": str(caps.backend),
        "model_id": str(caps.model_id or ""),
        "revision": str(caps.model_revision or ""),
        "config_hash": str(caps.config_hash or ""),
    }


def _reward_block(opts: RelabelOptions, url: str) -> RewardModelConfig:
    from evolve_envs.stack.loading import load_config

    block: dict[str, JsonValue] = {
        "enable": True,
        "kind": "progress",
        "endpoint": url,
        "calls": "sync",
        "terminate_on_done": False,
        "last_check": "grid",
    }
    if opts.every_frame:
        block.update(call_every=1, start_step=1)
    for key in ("call_every", "start_step", "mode"):
        if getattr(opts, key) is not None:
            block[key] = getattr(opts, key)
    return load_config(*opts.config, overrides={"reward_model": block}).reward_model


def _write_json(path: Path, body: JsonValue) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def _open_work(work: Path, state: dict[str, JsonValue]) -> int:
    """Create the work folder, or check that it belongs to this run; the episodes it holds."""
    found = work / "state.json"
    if found.is_file():
        old = json.loads(found.read_text())
        differs = [k for k in state if old.get(k) != state[k]]
        if differs:
            raise CliError(
                f"{work} holds an interrupted relabel with another {', '.join(differs)}; "
                "remove it, or relabel into another --out",
                ExitStatus.USAGE,
            )
        return len(list((work / "scores").glob("*.json")))
    _write_json(found, state)
    return 0


def _score(
    tracker: ProgressTracker, episode: RecordedEpisode, camera: str | None
) -> dict[str, list[float] | list[bool]]:
    """One episode through the tracker: progress and check flag per frame."""
    frames = episode.frames(camera=camera)
    tracker.reset(str(episode.meta.get("task") or "complete the task"), frames[0])
    progress, checks = [0.0], [False]
    for t in range(1, len(frames)):
        step = tracker.observe(t, frames[t], env_terminated=t == len(frames) - 1)
        if step.info.get("reward_model_errors"):
            raise _Failed(t)
        progress.append(float(step.progress))
        checks.append(bool(step.checked))
    return {"progress": progress, "is_check": checks}


class _Failed(Exception):
    def __init__(self, frame: int) -> None:
        super().__init__(frame)
        self.frame = frame


def relabel(opts: RelabelOptions, *, log: Callable[[str], None] = print) -> Path:
    """Score every episode of ``opts.dataset`` into a new dataset; returns its folder."""
    from evolve_envs.cli.calibrate import check_services, service_url
    from evolve_envs.recording.add_columns import copy_with_columns
    from evolve_envs.recording.episodes import open_recording
    from evolve_envs.stack.reward_model import open_reward_model

    src = Path(opts.dataset)
    if not src.is_dir():
        raise ValueError(f"{src} is not a dataset folder")
    lerobot = (src / "meta" / "info.json").is_file()
    if lerobot:
        options = {"camera": opts.camera, "stored_orientation": opts.orientation}
        dataset = open_recording(src, **{k: v for k, v in options.items() if v is not None})
        camera = None
    else:
        if opts.orientation is not None:
            raise ValueError("--orientation applies to LeRobot datasets only")
        dataset, camera = open_recording(src), opts.camera
    episodes = list(dataset)
    if not episodes:
        raise ValueError(f"{src} holds no episode")
    if camera is not None and camera not in episodes[0].cameras:
        raise ValueError(f"{src} has no camera {camera!r} (cameras: {episodes[0].cameras})")
    check_services([opts.service], token=opts.token)  # a dead service: nothing written
    with service_url(opts.service) as url:
        rm = _reward_block(opts, url)
        with open_reward_model(rm) as model:
            identity = _identity(model.capabilities)
            label = _slug(opts.label or identity["backend"])
            names = [f"reward_model.{label}.{k}" for k in ("progress", "is_check", *IDENTITY)]
            have = set(getattr(dataset, "features", {})) | set(episodes[0].table().column_names)
            if have & set(names):
                raise ValueError(
                    f"{src} already has reward_model.{label}.* columns; give another --label"
                )
            out = Path(opts.out) if opts.out else src.parent / f"{src.name}-{label}"
            if out.exists():
                raise ValueError(f"{out} exists; give a new folder with --out")
            work = out.parent / f".{out.name}.relabel"
            settings = model.settings.model_dump(mode="json")
            state = {
                "dataset": str(src.resolve()),
                "label": label,
                "identity": identity,
                "schedule": settings,
                "camera": opts.camera or None,
                "orientation": opts.orientation,
            }
            kept = _open_work(work, state)
            if kept:
                log(f"resuming: {kept} of {len(episodes)} episodes were scored before")
            tracker = model.tracker()
            keys = [int(ep.meta.get("episode_index", i)) for i, ep in enumerate(episodes)]
            for done, (key, ep) in enumerate(zip(keys, episodes, strict=True)):
                path = work / "scores" / f"{key:06d}.json"
                if path.is_file():
                    continue
                try:
                    scores = _score(tracker, ep, camera)
                except _Failed as exc:
                    scored = len(list((work / "scores").glob("*.json")))
                    why = "it stopped answering"
                    try:
                        check_services([url], token=opts.token)
                    except Exception as dead:  # noqa: BLE001 - its one line says why
                        why = str(dead)
                    raise CliError(
                        f"the reward service failed on episode {key} (frame {exc.frame}): "
                        f"{why}; {scored} of {len(episodes)} episodes are scored and kept in "
                        f"{work}: run the same command again to resume",
                        ExitStatus.SERVICE,
                    ) from None
                _write_json(path, scores)
                log(
                    f"episode {done + 1}/{len(episodes)}: {sum(scores['is_check'])} checks, "
                    f"final progress {scores['progress'][-1]:.1f}%"
                )
    columns: dict[int, dict[str, JsonValue]] = {}
    for key in keys:
        scores = json.loads((work / "scores" / f"{key:06d}.json").read_text())
        n = len(scores["progress"])
        row = {names[0]: np.asarray(scores["progress"], np.float32), names[1]: scores["is_check"]}
        row.update({name: [identity[k]] * n for name, k in zip(names[2:], IDENTITY, strict=True)})
        columns[key] = row
    scalar = {"shape": [1], "names": None}
    features = {names[0]: {"dtype": "float32", **scalar}, names[1]: {"dtype": "bool", **scalar}}
    features.update({name: {"dtype": "string", **scalar} for name in names[2:]})
    staging = work / "dataset"
    shutil.rmtree(staging, ignore_errors=True)  # an assembly that was cut short
    copy_with_columns(src, staging, columns, features)
    note = staging / ("meta" if lerobot else "") / "relabel.json"
    notes = json.loads(note.read_text()) if note.is_file() else []
    notes.append(
        {
            "label": label,
            "identity": identity,
            "service": opts.service,
            "schedule": settings,
            "columns": names,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
    )
    note.write_text(json.dumps(notes, indent=2))
    os.replace(staging, out)
    shutil.rmtree(work, ignore_errors=True)
    return out


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``relabel`` subcommand's options."""
    rl = sub.add_parser(
        "relabel", help="score every episode of a dataset with a reward model, into a new one"
    )
    rl.add_argument("dataset", help="a LeRobotDataset v3 folder or a recording folder")
    rl.add_argument(
        "--service",
        required=True,
        metavar="URL|mock:RULE|MODEL_DIR",
        help="the reward service to score with (MODEL_DIR: fit-reward's)",
    )
    rl.add_argument("--out", default=None, help="the new dataset (default: DATASET-<label>)")
    rl.add_argument(
        "--config",
        action="append",
        default=[],
        help="a config whose reward_model block gives the schedule and mode",
    )
    rl.add_argument("--call-every", type=int, default=None, help="a check every N frames")
    rl.add_argument("--start-step", type=int, default=None, help="the first check's frame")
    rl.add_argument("--every-frame", action="store_true", help="check every frame")
    rl.add_argument(
        "--mode",
        choices=("pairwise", "incremental", "trajectory"),
        default=None,
        help="how a check asks the model (default: the config's, pairwise)",
    )
    rl.add_argument(
        "--label",
        default=None,
        help="the columns' label: reward_model.<label>.* (default: the backend)",
    )
    rl.add_argument("--camera", default=None, help="the camera to score (default: the dataset's)")
    rl.add_argument(
        "--orientation",
        choices=("rot180", "upright", "raw"),
        default=None,
        help="how a LeRobot dataset's LIBERO frames are turned from MuJoCo's render when it does "
        "not say (lerobot/libero: rot180); they are scored upright",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``evolve-envs relabel``."""
    opts = RelabelOptions(
        dataset=args.dataset,
        service=args.service,
        out=args.out,
        config=list(args.config),
        call_every=args.call_every,
        start_step=args.start_step,
        every_frame=args.every_frame,
        mode=args.mode,
        label=args.label,
        camera=args.camera,
        orientation=args.orientation,
    )
    start = time.perf_counter()
    try:
        out = relabel(opts)
    except KeyboardInterrupt:
        print(
            "\nevolve-envs relabel: interrupted; the scored episodes are kept: run the same "
            "command again to resume",
            flush=True,
        )
        return ExitStatus.INTERRUPTED
    note = out / "meta" / "relabel.json"
    notes = json.loads((note if note.is_file() else out / "relabel.json").read_text())[-1]
    who = notes["identity"]
    print(
        f"wrote {out}: columns reward_model.{notes['label']}.* by {who['backend']} "
        f"{who['model_id']} ({time.perf_counter() - start:.1f} s)"
    )
    return ExitStatus.OK
