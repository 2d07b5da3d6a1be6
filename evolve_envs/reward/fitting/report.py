"""A fitted progress model's report (``report.json``, ``curves.png``) and card (``README.md``),
written into its model directory: VOC, done precision and recall, held out and on training.

Example:
    >>> round(voc([0.1, 0.2, 0.15, 0.9]), 2)
    0.8
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.reward.fitting.data import FitEpisode, progress_labels
from evolve_envs.reward.fitting.model import (
    WEIGHTS_FILE,
    ProgressNet,
    content_hash,
)

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = ["voc", "episode_metrics", "write_report"]


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=np.float64)
    for value in np.unique(x):
        tie = x == value
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def voc(values: Sequence[float]) -> float:
    """Spearman of ``values`` against their order (flat: 0; fewer than 2: NaN)."""
    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return math.nan
    if np.all(v == v[0]):
        return 0.0
    return float(np.corrcoef(_ranks(np.arange(len(v), dtype=np.float64)), _ranks(v))[0, 1])


def episode_metrics(
    curves: Sequence[Sequence[float]], success: Sequence[bool], threshold: float
) -> dict[str, JsonValue]:
    """VOC, done precision/recall and the failure modes over episodes' progress curves."""
    truth = np.asarray(success, bool)
    top = np.array([max(c) for c in curves])
    pred = top >= threshold
    tp, fp, fn = int(np.sum(pred & truth)), int(np.sum(pred & ~truth)), int(np.sum(~pred & truth))
    vocs = [voc(c) for c, s in zip(curves, success, strict=True) if s and len(c) > 2]
    finals = [c[-1] for c, s in zip(curves, success, strict=True) if s]
    return {
        "episodes": len(curves),
        "successes": int(truth.sum()),
        "voc": float(np.mean(vocs)) if vocs else None,
        "voc_min": float(np.min(vocs)) if vocs else None,
        "voc_per_episode": vocs,
        "done_precision": tp / (tp + fp) if tp + fp else None,
        "done_recall": tp / (tp + fn) if tp + fn else None,
        "done": {"tp": tp, "fp": fp, "fn": fn, "threshold": threshold},
        "final_progress_on_success": float(np.mean(finals)) if finals else None,
        "max_progress_on_failure": float(np.mean(top[~truth])) if (~truth).any() else None,
    }


def _curves(net: ProgressNet, episodes: Sequence[FitEpisode]) -> list[list[float]]:
    return [
        net.predict(e.frames, [e.task] * len(e.frames)).astype(float).tolist() for e in episodes
    ]


def _plot(
    path: Path,
    held: Sequence[FitEpisode],
    curves: list[list[float]],
    losses: list[float],
    threshold: float,
    cap: float,
) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib comes with the report and fit extras
        return False
    fig, (ax, lx) = plt.subplots(1, 2, figsize=(10, 4))
    for e, c in zip(held, curves, strict=True):
        x = np.linspace(0, 1, len(c))
        ax.plot(x, c, color="tab:green" if e.success else "tab:red", alpha=0.7, lw=1)
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="label of a success (t / T)")
    ax.axhline(threshold, color="grey", ls=":", label=f"done threshold {threshold:.2f}")
    ax.axhline(cap, color="tab:red", ls=":", lw=0.8, label="failure cap")
    ax.set(
        xlabel="fraction of the episode",
        ylabel="model progress",
        ylim=(-0.02, 1.02),
        title="held-out episodes (green: success, red: failure)",
    )
    ax.legend(fontsize=7, loc="upper left")
    lx.plot(range(1, len(losses) + 1), losses)
    lx.set(xlabel="epoch", ylabel="training loss", yscale="log", title="fit")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _success_labels(report: dict[str, JsonValue]) -> str:
    if report["options"].get("done_gap"):
        cap = report["failure_cap"]
        return f"frame t of T is t / T x {cap} of the way, the last frame 1 (done stands apart)"
    return "frame t of T is t / T of the way (the last frame is done)"


def _done_rule(report: dict[str, JsonValue]) -> str:
    if report["options"].get("done_on") == "frame":
        return "chosen on the training frames: a success's last frame against every other frame"
    return "chosen on the training episodes: an episode's highest progress against its success"


def _card(report: dict[str, JsonValue]) -> str:
    held, train = report["held_out"], report["train"]

    def num(v: JsonValue) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    return f"""# {report["name"]}: a progress model for evolve-envs

Frame + task text -> task progress in [0, 1], fitted with `evolve-envs fit-reward` on
`{report["data"]}` ({report["episodes"]} episodes; {len(report["held_out_ids"])} held out by
episode). Identity (the content hash of `config.json` and the weights): `{report["content_hash"]}`.

## Labels

* successful episodes: {_success_labels(report)};
* failed episodes: every frame held at or below {report["failure_cap"]} (a penalty above it, no
  target);
* done: the progress reaches {report["done_threshold"]:.2f} ({_done_rule(report)}).

## Measured

| | episodes | VOC (mean, min) | done precision | done recall |
|---|---|---|---|---|
| held out | {held["episodes"]} | {num(held["voc"])}, {num(held["voc_min"])} | {num(held["done_precision"])} | {num(held["done_recall"])} |
| training | {train["episodes"]} | {num(train["voc"])}, {num(train["voc_min"])} | {num(train["done_precision"])} | {num(train["done_recall"])} |

Fitted in {report["fit_s"]:.0f} s on {report["device"]}; {report["parameters"]} trainable
parameters, {report["size_bytes"]} bytes of weights. Curves: `curves.png`; everything:
`report.json`.

## Use

```bash
evolve-reward-server --backend fitted --ckpt-path MODEL_DIR --port 8111
evolve-envs calibrate RECORDING --service MODEL_DIR
```

## Limits

It has seen only the scenes, cameras and tasks of its data; it judges one frame at a time (it
cannot tell a block being put down from one being picked up); a policy trained on it may find
frames it scores high that the data never showed (watch the hacking alarm).
"""  # noqa: E501


def write_report(
    net: ProgressNet,
    out: Path,
    *,
    train: Sequence[FitEpisode],
    train_scores: Sequence[np.ndarray],
    held_out: Sequence[FitEpisode],
    losses: list[float],
    fit_s: float,
    data: str,
    options: dict[str, JsonValue],
) -> dict[str, JsonValue]:
    """Write ``report.json``, ``curves.png`` and ``README.md`` into ``out``; returns the report
    (``train_scores``: the model's per-frame progress on ``train``, already computed by the fit
    for its done threshold)."""
    threshold = net.config.done_threshold
    gap = float(options["failure_cap"]) if options.get("done_gap") else None
    held_curves = _curves(net, held_out)
    train_curves = [np.asarray(s, dtype=float).tolist() for s in train_scores]
    trainable = [p for n, p in net.module.named_parameters() if not n.startswith("backbone.")]
    report: dict[str, JsonValue] = {
        "name": net.config.name,
        "content_hash": content_hash(out),
        "data": data,
        "episodes": len(train) + len(held_out),
        "held_out_ids": [e.episode_id for e in held_out],
        "train_ids": [e.episode_id for e in train],
        "done_threshold": threshold,
        "failure_cap": options["failure_cap"],
        "held_out": episode_metrics(held_curves, [e.success for e in held_out], threshold),
        "train": episode_metrics(train_curves, [e.success for e in train], threshold),
        "held_out_curves": [
            {
                "episode_id": e.episode_id,
                "success": e.success,
                "progress": c,
                "label": [
                    None if math.isnan(v) else float(v)
                    for v in progress_labels(e.steps, e.success, gap)
                ],
            }
            for e, c in zip(held_out, held_curves, strict=True)
        ],
        "losses": losses,
        "fit_s": fit_s,
        "device": net.device,
        "parameters": int(sum(p.numel() for p in trainable)),
        "size_bytes": (out / WEIGHTS_FILE).stat().st_size,
        "options": options,
    }
    report["curves_png"] = _plot(
        out / "curves.png", held_out, held_curves, losses, threshold, options["failure_cap"]
    )
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "README.md").write_text(_card(report))
    return report
