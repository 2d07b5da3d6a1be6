"""The training loop's own held-out evaluation, its log and the best policy.

With ``eval.every_s`` / ``eval.every_updates``, :class:`PeriodicEval` evaluates the current policy
on held-out scenes, writes ``eval.csv``, TensorBoard / W&B series and videos, and keeps the best
policy atomically in ``best.safetensors``, a policy file (weights, config, spaces and the
evaluation; no pickle: :mod:`evolve_envs.training.policy_file`) (docs/training.md, "Held-out
evaluation and the best checkpoint").

>>> from evolve_envs.training.config import TrainConfig
>>> PeriodicEval.due_at(TrainConfig(eval={"every_s": 60}).eval, 61.0, 0, 0.0, 0)
True
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from evolve_envs.training.checkpoint import UntrustedCheckpointError, load_pt
from evolve_envs.training.config import EvalConfig, TrainConfig
from evolve_envs.training.evaluation import HeldOutEvaluator, held_out_seeds
from evolve_envs.training.policy_file import BEST_POLICY, read_policy_info, save_policy_file

if TYPE_CHECKING:
    import numpy as np

    from evolve_envs.recording.metrics_log import EpisodeLog
    from evolve_envs.training.policies.base import Policy
    from evolve_envs.training.run_log import TrainLog

__all__ = ["BEST", "PeriodicEval", "format_eval"]

#: The best policy's file in the run directory.
BEST = BEST_POLICY
#: Where runs before policy files kept it (read for the evaluation a resumed run has to beat).
OLD_BEST = "best.pt"


def format_eval(row: dict[str, object]) -> str:
    """One evaluation as the line the loop prints.

    >>> format_eval({"time_s": 60.0, "updates": 40, "episodes": 10, "success": 0.4,
    ...              "success_sampled": 0.5, "best": True})
    '[   60.0s] eval: held-out success 0.40 (mean action), 0.50 (sampled) on 10 unseen scenes, env success flag; updates 40 (new best: best.safetensors)'
    """  # noqa: E501

    def pct(v: object) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"

    sampled = f", {pct(row.get('success_sampled'))} (sampled)" if "success_sampled" in row else ""
    return (
        f"[{row['time_s']:7.1f}s] eval: held-out success {pct(row['success'])} (mean action)"
        f"{sampled} on {row['episodes']} unseen scenes, env success flag; updates "
        f"{row['updates']}" + (f" ({_best_note(row)})" if row.get("best") else "")
    )


def _best_note(row: dict[str, object]) -> str:
    """What keeping ``row``'s policy as the best means: a first evaluation that solved nothing
    is kept only until something does better, and is not called a best.

    >>> _best_note({"success": 0.0, "first": True}), _best_note({"success": 0.3})
    ('first evaluation, nothing solved yet: kept as best.safetensors until one does better', 'new best: best.safetensors')
    """  # noqa: E501
    if row.get("first") and not row.get("success") and not row.get("success_sampled"):
        return f"first evaluation, nothing solved yet: kept as {BEST} until one does better"
    return f"new best: {BEST}"


class PeriodicEval:
    """Held-out evaluation inside the training loop (see the module docstring); a no-op when
    ``eval`` has neither ``every_s`` nor ``every_updates``.

    >>> import io, tempfile
    >>> off = PeriodicEval(TrainConfig(), Path(tempfile.mkdtemp()), None, io.StringIO())
    >>> off.enabled, off.columns(), off.summary()
    (False, {}, None)
    """

    def __init__(self, cfg: TrainConfig, run_dir: Path, tlog: TrainLog, log: TextIO) -> None:
        self.cfg = cfg
        self.ecfg: EvalConfig = cfg.eval
        self.enabled = self.ecfg.enabled
        self.run_dir = run_dir
        self.tlog = tlog
        self.log = log
        self.seeds = held_out_seeds(self.ecfg.episodes, self.ecfg.seed_offset)
        self.evaluator = HeldOutEvaluator(cfg, self.ecfg.num_envs) if self.enabled else None
        self.csv: EpisodeLog | None = None
        self.history: list[dict[str, object]] = []
        self.best: dict[str, object] | None = self._previous_best()
        self.last_s = 0.0
        self.last_updates: int | None = None

    def _previous_best(self) -> dict[str, object] | None:
        """The evaluation of the best policy left by the run this one resumes (None: none)."""
        if not self.enabled:
            return None
        path = self.run_dir / BEST
        if path.is_file():
            return dict(read_policy_info(path).get("eval") or {})
        old = self.run_dir / OLD_BEST
        if not old.is_file():
            return None
        try:  # an older run's best.pt, read only if it is plain data
            payload = load_pt(old)
        except UntrustedCheckpointError:
            return None
        return dict(payload.get("eval") or {}) if isinstance(payload, dict) else None

    @staticmethod
    def due_at(
        ecfg: EvalConfig, elapsed: float, updates: int, last_s: float, last_updates: int | None
    ) -> bool:
        """Whether an evaluation is due ``elapsed`` seconds into the run at ``updates``."""
        if ecfg.every_s is not None and elapsed - last_s >= ecfg.every_s:
            return True
        done = updates - (last_updates if last_updates is not None else 0)
        return ecfg.every_updates is not None and done >= ecfg.every_updates

    def columns(self) -> dict[str, float]:
        """The latest held-out numbers for the metrics row (empty when evaluation is off)."""
        if not self.enabled:
            return {}
        last = self.history[-1] if self.history else {}
        return {
            "eval_success": last.get("success", math.nan),
            "eval_success_sampled": last.get("success_sampled", math.nan),
        }

    def maybe(self, policy: Policy, counters: dict[str, int], elapsed: float) -> None:
        """Evaluate when due (``eval.every_s`` / ``eval.every_updates``)."""
        if self.enabled and self.due_at(
            self.ecfg, elapsed, int(counters["updates"]), self.last_s, self.last_updates
        ):
            self.evaluate(policy, counters, elapsed)

    def final(self, policy: Policy, counters: dict[str, int], elapsed: float) -> None:
        """The evaluation at the end of the run (unless one ran at this update count)."""
        if self.enabled and self.last_updates != int(counters["updates"]):
            self.evaluate(policy, counters, elapsed)

    def evaluate(
        self, policy: Policy, counters: dict[str, int], elapsed: float
    ) -> dict[str, object]:
        """Evaluate ``policy`` now; log, record the video, keep the best policy; return the row."""
        assert self.evaluator is not None
        updates = int(counters["updates"])
        key = self.ecfg.video_key or self.cfg.policy.image_key
        t0 = time.monotonic()
        det = self.evaluator.run(policy, self.seeds, record=self.ecfg.video_episodes, video_key=key)
        row: dict[str, object] = {
            "time_s": round(elapsed, 2),
            "env_steps": int(counters.get("env_steps_in", 0)),
            "episodes": det.episodes,
            "success": det.success_rate,
        }
        if self.ecfg.sampled:
            smp = self.evaluator.run(policy, self.seeds, deterministic=False, sample_seed=0)
            row["success_sampled"] = smp.success_rate
        row["episode_length"] = float(sum(det.lengths)) / max(1, len(det.lengths))
        row["eval_s"] = round(time.monotonic() - t0, 2)
        self._write(updates, row)
        if det.frames:
            self._video(updates, [f for episode in det.frames for f in episode])
        row = {"updates": updates, **row}
        first = self.best is None
        if self._better(row):
            self._save_best(policy, counters, row)
            row["best"] = True
        self.history.append(row)
        self.last_s, self.last_updates = elapsed, updates
        print(format_eval({**row, "first": first}), file=self.log, flush=True)
        return row

    def _write(self, updates: int, row: dict[str, object]) -> None:
        from evolve_envs.recording.metrics_log import EpisodeLog

        if self.csv is None:
            self.csv = EpisodeLog(
                self.run_dir, tensorboard=False, step_column="updates", csv_name="eval.csv"
            )
        self.csv.add(updates, row)
        self.tlog.log_scalars("eval", updates, row)

    def _video(self, updates: int, frames: list[np.ndarray]) -> None:
        mp4 = None
        try:
            from evolve_envs.recording.media import write_mp4

            mp4 = write_mp4(self.run_dir / "eval_videos" / f"update_{updates:08d}.mp4", frames)
        except ImportError:  # no imageio: TensorBoard still gets the GIF
            pass
        self.tlog.log_video("eval/video", frames, updates, mp4=mp4)

    def _better(self, row: dict[str, object]) -> bool:
        def score(r: dict[str, object]) -> tuple[float, float]:
            def num(v: object) -> float:
                return -1.0 if v is None or math.isnan(float(v)) else float(v)

            return num(r.get("success")), num(r.get("success_sampled"))

        return self.best is None or score(row) > score(self.best)

    def _save_best(self, policy: Policy, counters: dict[str, int], row: dict[str, object]) -> None:
        assert self.evaluator is not None
        env = self.evaluator.envs(1)[0]  # the spaces the policy was built for
        info = {
            "config": self.cfg.stored(),  # as checkpoint.pt: never the token
            "algo": self.cfg.algo,
            "counters": {k: int(v) for k, v in counters.items()},
            "eval": {k: v for k, v in row.items() if k != "best"},
        }
        save_policy_file(
            self.run_dir / BEST, policy.state_dict(), info, env.observation_space, env.action_space
        )
        self.best = info["eval"]

    def summary(self) -> dict[str, object] | None:
        """What ``summary.json`` records: the scenes, the final and the best evaluation."""
        if not self.enabled:
            return None
        return {
            "scenes": f"{len(self.seeds)} held-out reset seeds from {self.seeds[0]}",
            "success_source": "the env's success flag (info['is_success']), no reward model",
            "final": self.history[-1] if self.history else None,
            "best": self.best,
            "evaluations": len(self.history),
        }

    def close(self) -> None:
        """Close the evaluation envs and the CSV."""
        if self.evaluator is not None:
            self.evaluator.close()
        if self.csv is not None:
            self.csv.close()
