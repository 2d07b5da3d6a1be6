"""`fit_reward`: fit a progress model on a dataset's episodes into a model directory (the loss,
the resume from ``OUT/.fit/`` and the done threshold are described in docs/fit-reward.md).

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

from evolve_envs.reward.service.backends.progress_net import (
    ProgressNet,
    ProgressNetConfig,
    load_backbone,
    pick_device,
    save_model,
)
from evolve_envs.train.reward_fit.data import (
    FAILURE_CAP,
    FitEpisode,
    UnusableDataError,
    load_episodes,
    progress_labels,
    split_episodes,
)

if TYPE_CHECKING:
    import torch
    from pydantic import JsonValue
    from tqdm import tqdm

__all__ = ["FitOptions", "done_threshold", "fit_reward", "pick_done_threshold"]

_WORK = ".fit"
#: a done frame (the last of a success) weighs this many ordinary frames: one frame per episode
#: carries the done decision, which must stand apart from the near misses before it
DONE_WEIGHT = 5.0


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


def _frames_and_labels(
    episodes: Sequence[FitEpisode], done_gap: float | None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    frames = np.concatenate([e.frames for e in episodes])
    labels = np.concatenate([progress_labels(e.steps, e.success, done_gap) for e in episodes])
    tasks = [e.task for e in episodes for _ in range(len(e.frames))]
    return frames, labels, tasks


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
    model = {
        k: v.detach().cpu().contiguous()
        for k, v in net.module.state_dict().items()
        if not k.startswith("backbone.")
    }
    tensors, groups = _optimizer_tensors(opt)
    save_file(model, str(work / "model.tmp"))
    save_file({k: v.cpu().contiguous() for k, v in tensors.items()}, str(work / "optimizer.tmp"))
    (work / "model.tmp").replace(work / "model.safetensors")
    (work / "optimizer.tmp").replace(work / "optimizer.safetensors")
    state = {**meta, "epoch": epoch, **groups}
    (work / "state.tmp").write_text(json.dumps(state))
    (work / "state.tmp").replace(work / "state.json")


def _load_work(work: Path, net: ProgressNet, opt: torch.optim.Optimizer) -> tuple[int, list[float]]:
    from safetensors.torch import load_file

    state = json.loads((work / "state.json").read_text())
    net.module.load_state_dict(
        load_file(str(work / "model.safetensors"), device=net.device), strict=False
    )
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


def fit_reward(opts: FitOptions) -> dict[str, JsonValue]:
    """Fit, write the model directory ``opts.out``, and return its report (see module docs)."""
    import torch

    from evolve_envs.train.reward_fit.report import write_report

    out = Path(opts.out)
    work = out / _WORK
    if out.exists() and any(p.name != _WORK for p in out.iterdir()):
        raise UnusableDataError(f"{out} exists and is not an interrupted fit; choose another --out")
    if opts.epochs < 1 or opts.batch_size < 1:
        raise ValueError("epochs and batch_size must be >= 1")
    if not 0 <= opts.failure_cap < 1:
        raise ValueError(f"failure_cap is a progress in [0, 1), got {opts.failure_cap}")
    if opts.done_on not in ("episode", "frame"):
        raise ValueError(f"done_on is 'episode' or 'frame', got {opts.done_on!r}")
    started = time.perf_counter()
    episodes = load_episodes(
        opts.data,
        input_size=opts.input_size,
        camera=opts.camera,
        demonstrations=opts.demonstrations,
    )
    train, held = split_episodes(episodes, opts.held_out, seed=opts.seed)
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
    backbone, dim = load_backbone(opts.backbone, device) if opts.backbone else (None, 0)
    size = int(getattr(backbone.config, "image_size", 0) or 0) if backbone is not None else 0
    if size and size != opts.input_size:  # the encoder's own input size
        episodes = load_episodes(
            opts.data, input_size=size, camera=opts.camera, demonstrations=opts.demonstrations
        )
        train, held = split_episodes(episodes, opts.held_out, seed=opts.seed)
    config = ProgressNetConfig(
        input_size=size or opts.input_size,
        channels=opts.channels,
        backbone=backbone is not None,
        backbone_dim=dim,
        name=opts.name or out.name,
    )
    net = ProgressNet(config, backbone=backbone, device=device)
    params = [p for p in net.module.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=opts.lr)
    start, losses = _load_work(work, net, opt) if (work / "state.json").is_file() else (0, [])
    gap = opts.failure_cap if opts.done_gap else None
    frames, labels, tasks = _frames_and_labels(train, gap)
    pixels = torch.as_tensor(frames).permute(0, 3, 1, 2).contiguous()  # uint8, on the CPU
    ok = ~np.isnan(labels)
    target = torch.as_tensor(np.nan_to_num(labels), device=net.device)
    is_success = torch.as_tensor(ok, device=net.device)
    weight = torch.as_tensor(
        np.where(labels == 1.0, DONE_WEIGHT, 1.0), device=net.device, dtype=torch.float32
    )
    bar = _bar(opts.epochs, start, opts.progress)
    for epoch in range(start, opts.epochs):
        net.module.train()
        order = torch.randperm(
            len(frames), generator=torch.Generator().manual_seed(opts.seed * 100_003 + epoch)
        ).numpy()
        total, batches = 0.0, 0
        for i in range(0, len(order), opts.batch_size):
            idx = order[i : i + opts.batch_size]
            ids, offsets = net.words([tasks[j] for j in idx])
            images = pixels[idx].to(net.device).float() / 255.0
            pred = torch.sigmoid(net.module(images, ids, offsets))
            succ, y, w = is_success[idx], target[idx], weight[idx]
            terms = []
            if succ.any():
                err = w[succ] * (pred[succ] - y[succ]) ** 2
                terms.append(err.sum() / w[succ].sum())
            if (~succ).any():
                terms.append((torch.relu(pred[~succ] - opts.failure_cap) ** 2).mean())
            loss = torch.stack(terms).sum()
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
    shutil.rmtree(work, ignore_errors=True)
    return report
