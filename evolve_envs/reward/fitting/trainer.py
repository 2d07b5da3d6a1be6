"""`fit_reward`: fit a progress model on a dataset's episodes into a model directory: the data
streamed into a frame store (:mod:`.data`), the network built (:mod:`.model`), Adam on the loss
(:mod:`.loss`) for the epochs with a checkpoint in ``OUT/.fit/`` after each (a stopped fit
resumes from it), the done threshold, the report (:mod:`.report`); docs/fit-reward.md.

Example::

    fit_reward(FitOptions("shipped", "runs/rp-model", epochs=2))["held_out"]["voc"]
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from evolve_envs.reward.fitting.data import (
    FAILURE_CAP,
    FitEpisode,
    FitSamples,
    FrameStore,
    UnusableDataError,
    load_episodes,
    split_episodes,
)
from evolve_envs.reward.fitting.loss import frame_targets, progress_loss
from evolve_envs.reward.fitting.model import (
    ProgressNet,
    build_model,
    load_weights,
    pick_device,
    save_model,
    save_weights,
    trainable,
)

if TYPE_CHECKING:
    import torch
    from pydantic import JsonValue
    from tqdm import tqdm

__all__ = ["FitOptions", "done_threshold", "fit_reward", "pick_done_threshold"]

_WORK = ".fit"
#: the frame store's file in the work folder (deleted when the fit ends, stopped or not)
_FRAMES = "frames.u8"


@dataclass
class FitOptions:
    """What ``evolve-envs fit-reward`` takes.

    >>> FitOptions("runs/ds", "runs/model").epochs
    30
    """

    data: str
    out: str
    epochs: int = 30
    batch_size: int = 64
    lr: float = 2e-3
    seed: int = 0
    held_out: float = 0.2
    camera: str | None = None
    input_size: int = 64
    channels: int = 16
    device: str = "auto"
    backbone: str | None = None
    demonstrations: bool = False
    failure_cap: float = FAILURE_CAP
    #: a success's frames before its last are labelled below ``failure_cap`` (docs/fit-reward.md)
    done_gap: bool = False
    #: how the done threshold is picked: ``episode`` (an episode's highest progress against its
    #: success) or ``frame`` (a success's last frame against every other frame; docs/fit-reward.md)
    done_on: Literal["episode", "frame"] = "episode"
    name: str | None = None
    progress: bool = True

    def fingerprint(self) -> dict[str, JsonValue]:
        """The options a resumed fit must share with the interrupted one (``epochs`` may grow:
        each epoch's batches depend on the seed and the epoch alone)."""
        skip = {"out", "device", "progress", "epochs"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}


def pick_done_threshold(
    max_progress: Sequence[float], success: Sequence[bool], *, low: float = 0.5
) -> float:
    """The middle of the thresholds (0.01 steps from ``low`` to 0.99) with the best F1 of
    ``max_progress >= threshold`` against ``success``.

    >>> pick_done_threshold([0.99, 0.97, 0.6, 0.7], [True, True, False, False])
    0.84
    """
    scores, truth = np.asarray(max_progress, np.float64), np.asarray(success, bool)
    grid = np.round(np.arange(low, 0.995, 0.01), 2)
    f1 = []
    for t in grid:
        pred = scores >= t
        tp, fp, fn = np.sum(pred & truth), np.sum(pred & ~truth), np.sum(~pred & truth)
        f1.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    best = np.flatnonzero(np.isclose(f1, max(f1)))
    return float(np.round((grid[best[0]] + grid[best[-1]]) / 2, 2))


def _data_hash(episodes: Sequence[FitEpisode]) -> str:
    digest = hashlib.sha256()
    for e in episodes:
        digest.update(f"{e.episode_id}|{e.task}|{e.success}|{e.frames.shape}".encode())
        digest.update(e.frames[:, ::8, ::8].tobytes())
    return digest.hexdigest()[:16]


def _optimizer_tensors(
    opt: torch.optim.Optimizer,
) -> tuple[dict[str, torch.Tensor], dict[str, JsonValue]]:
    state = opt.state_dict()
    tensors = {f"{i}.{k}": v for i, s in state["state"].items() for k, v in s.items()}
    return tensors, {"param_groups": state["param_groups"]}


def _save_work(
    work: Path, net: ProgressNet, opt: torch.optim.Optimizer, epoch: int, meta: dict[str, JsonValue]
) -> None:
    from safetensors.torch import save_file

    work.mkdir(parents=True, exist_ok=True)
    tensors, groups = _optimizer_tensors(opt)
    save_weights(net, work / "model.tmp")
    save_file({k: v.cpu().contiguous() for k, v in tensors.items()}, str(work / "optimizer.tmp"))
    (work / "model.tmp").replace(work / "model.safetensors")
    (work / "optimizer.tmp").replace(work / "optimizer.safetensors")
    state = {**meta, "epoch": epoch, **groups}
    (work / "state.tmp").write_text(json.dumps(state))
    (work / "state.tmp").replace(work / "state.json")


def _load_work(work: Path, net: ProgressNet, opt: torch.optim.Optimizer) -> tuple[int, list[float]]:
    from safetensors.torch import load_file

    state = json.loads((work / "state.json").read_text())
    load_weights(net, work / "model.safetensors")
    flat = load_file(str(work / "optimizer.safetensors"), device=net.device)
    per: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        index, _, name = key.partition(".")
        per.setdefault(int(index), {})[name] = value
    opt.load_state_dict({"state": per, "param_groups": state["param_groups"]})
    return int(state["epoch"]), list(state.get("losses", []))


def _bar(total: int, initial: int, enabled: bool) -> tqdm | None:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with the report and fit extras
        return None
    return tqdm(
        total=total,
        initial=initial,
        desc="fit-reward",
        unit="epoch",
        file=sys.stderr,
        dynamic_ncols=True,
    )


def done_threshold(
    scores: Sequence[np.ndarray],
    success: Sequence[bool],
    done_on: Literal["episode", "frame"] = "episode",
) -> float:
    """The done threshold for episodes' per-frame ``scores``: ``episode`` picks it on each
    episode's highest score against its success; ``frame`` on every frame, a success's last
    frame against all others (the frames just before done included).

    >>> scores = [np.array([0.2, 0.9, 0.97]), np.array([0.3, 0.92, 0.99]), np.array([0.4, 0.7])]
    >>> ok = [True, True, False]
    >>> done_threshold(scores, ok), done_threshold(scores, ok, "frame")
    (0.84, 0.95)
    """
    if done_on == "episode":
        return pick_done_threshold([float(s.max()) for s in scores], success)
    last = [
        np.arange(len(s)) == len(s) - 1 if ok else np.zeros(len(s), bool)
        for s, ok in zip(scores, success, strict=True)
    ]
    return pick_done_threshold(np.concatenate(scores).tolist(), np.concatenate(last).tolist())


def _check(opts: FitOptions, out: Path) -> None:
    if out.exists() and any(p.name != _WORK for p in out.iterdir()):
        raise UnusableDataError(f"{out} exists and is not an interrupted fit; choose another --out")
    if opts.epochs < 1 or opts.batch_size < 1:
        raise ValueError("epochs and batch_size must be >= 1")
    if not 0 <= opts.failure_cap < 1:
        raise ValueError(f"failure_cap is a progress in [0, 1), got {opts.failure_cap}")
    if opts.done_on not in ("episode", "frame"):
        raise ValueError(f"done_on is 'episode' or 'frame', got {opts.done_on!r}")


def _read(
    opts: FitOptions, store: FrameStore
) -> tuple[list[FitEpisode], list[FitEpisode], list[FitEpisode]]:
    """The dataset's episodes streamed into ``store``: ``(all, train, held_out)``."""
    episodes = load_episodes(
        opts.data,
        input_size=store.size,
        camera=opts.camera,
        demonstrations=opts.demonstrations,
        store=store,
    )
    train, held = split_episodes(episodes, opts.held_out, seed=opts.seed)
    return episodes, train, held


def _train(
    net: ProgressNet,
    samples: FitSamples,
    opts: FitOptions,
    work: Path,
    meta: dict[str, JsonValue],
) -> list[float]:
    """Adam on the loss from the last checkpoint in ``work`` (if any) to ``opts.epochs``, a
    checkpoint after each epoch; each epoch's batches come from the seed and the epoch alone.
    Returns the mean loss of every epoch."""
    import torch

    opt = torch.optim.Adam(trainable(net), lr=opts.lr)
    start, losses = _load_work(work, net, opt) if (work / "state.json").is_file() else (0, [])
    target, is_success, weight = frame_targets(samples.labels, net.device)
    bar = _bar(opts.epochs, start, opts.progress)
    for epoch in range(start, opts.epochs):
        net.module.train()
        order = torch.randperm(
            len(samples), generator=torch.Generator().manual_seed(opts.seed * 100_003 + epoch)
        ).numpy()
        total, batches = 0.0, 0
        for i in range(0, len(order), opts.batch_size):
            idx = order[i : i + opts.batch_size]
            ids, offsets = net.words(samples.tasks(idx))
            pixels = torch.as_tensor(samples.frames(idx)).permute(0, 3, 1, 2).contiguous()
            images = pixels.to(net.device).float() / 255.0
            pred = torch.sigmoid(net.module(images, ids, offsets))
            loss = progress_loss(pred, target[idx], is_success[idx], weight[idx], opts.failure_cap)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, batches = total + float(loss.detach()), batches + 1
        losses.append(total / max(batches, 1))
        _save_work(work, net, opt, epoch + 1, {**meta, "losses": losses})
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    if bar is not None:
        bar.close()
    return losses


def fit_reward(opts: FitOptions) -> dict[str, JsonValue]:
    """Fit, write the model directory ``opts.out``, and return its report (see module docs).

    The frames wait in ``OUT/.fit/frames.u8`` while the fit runs; a dataset that cannot be
    fitted on leaves nothing behind, a stopped fit its last finished epoch."""
    import torch

    from evolve_envs.reward.fitting.report import write_report

    out = Path(opts.out)
    work = out / _WORK
    _check(opts, out)
    started = time.perf_counter()
    fresh = not out.exists()
    store = FrameStore(work / _FRAMES, opts.input_size)
    try:
        episodes, train, held = _read(opts, store)
        meta = {"options": opts.fingerprint(), "data_hash": _data_hash(episodes)}
        if (work / "state.json").is_file():
            old = json.loads((work / "state.json").read_text())
            if {k: old.get(k) for k in meta} != meta:
                raise UnusableDataError(
                    f"{work} holds an interrupted fit of other data or options; "
                    "remove it, or fit into another --out"
                )
        device = pick_device(opts.device)
        torch.manual_seed(opts.seed)
        net = build_model(
            input_size=opts.input_size,
            channels=opts.channels,
            name=opts.name or out.name,
            backbone=opts.backbone,
            device=device,
        )
        if net.config.input_size != store.size:  # the encoder's own input size
            store.close()
            store = FrameStore(work / _FRAMES, net.config.input_size)
            episodes, train, held = _read(opts, store)
        del episodes
        gap = opts.failure_cap if opts.done_gap else None
        losses = _train(net, FitSamples(train, store, gap), opts, work, meta)
        scores = [net.predict(e.frames, [e.task] * len(e.frames)) for e in train]
        net.config.done_threshold = done_threshold(scores, [e.success for e in train], opts.done_on)
        save_model(net, out)
        report = write_report(
            net,
            out,
            train=train,
            train_scores=scores,
            held_out=held,
            losses=losses,
            fit_s=time.perf_counter() - started,
            data=str(opts.data),
            options=opts.fingerprint(),
        )
    except BaseException:
        if not (work / "state.json").is_file():  # no epoch finished: nothing to resume
            shutil.rmtree(out if fresh else work, ignore_errors=True)
        raise
    finally:
        store.close()
    shutil.rmtree(work, ignore_errors=True)
    return report
