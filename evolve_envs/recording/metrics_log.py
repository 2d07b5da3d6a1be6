"""Per-episode metrics of a rollout, appended as each episode finishes: CSV, TensorBoard, W&B."""

from __future__ import annotations

import csv
import importlib.util
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["EpisodeLog", "import_wandb", "tensorboard_available"]


def import_wandb(project: str) -> Any:
    """The ``wandb`` module, or ``ImportError`` saying that ``project`` needs it installed."""
    try:
        import wandb
    except Exception as exc:  # noqa: BLE001 - a broken install fails like a missing one
        raise ImportError(
            f"logging to the W&B project {project!r} needs Weights & Biases: pip install "
            f"'evolve-envs[wandb]' ({type(exc).__name__}: {exc})"
        ) from exc
    return wandb


def tensorboard_available() -> bool:
    """Whether the ``tensorboard`` package (its framework-free summary writer) is installed."""
    return importlib.util.find_spec("tensorboard") is not None


class EpisodeLog:
    """Append per-episode metric rows to CSV, TensorBoard and (optionally) W&B.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> with EpisodeLog(out, tensorboard=False, step_column="update") as log:
    ...     log.add(3, {"loss": 0.5, "kl": None})
    >>> with EpisodeLog(out, tensorboard=False, step_column="update") as log:  # resumed
    ...     log.add(4, {"kl": 0.01, "loss": 0.25})
    >>> (out / "metrics.csv").read_text().splitlines()
    ['update,loss,kl', '3,0.5,', '4,0.25,0.01']
    """

    def __init__(
        self,
        out: str | Path,
        *,
        tensorboard: bool = True,
        wandb_project: str | None = None,
        run_config: Mapping[str, object] | None = None,
        step_column: str = "episode",
        tb_prefix: str = "episode",
        csv_name: str = "metrics.csv",
    ) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.out / csv_name
        self.step_column = step_column
        self.tb_prefix = tb_prefix
        self._columns: list[str] | None = None
        if self.csv_path.exists():
            with self.csv_path.open(newline="", encoding="utf-8") as fh:
                self._columns = next(csv.reader(fh), None) or None
        self._tb: Any = None
        self._tb_media: Any = None  # an event file of its own for images (GIF videos)
        self._wandb: Any = None
        if tensorboard and tensorboard_available():
            from tensorboard.summary import Writer

            self._tb = Writer(str(self.out / "tensorboard"))
        if wandb_project:
            wandb = import_wandb(wandb_project)
            self._wandb = wandb.init(
                project=wandb_project, dir=str(self.out), config=dict(run_config or {})
            )

    @property
    def tensorboard_dir(self) -> Path | None:
        """Where TensorBoard events go, or None when not written."""
        return self.out / "tensorboard" if self._tb is not None else None

    def add(self, episode: int, metrics: Mapping[str, float | int | bool | None]) -> None:
        """Record one row (one finished episode's metrics by default) at step ``episode``
        (None and NaN are left blank / skipped)."""
        row = {self.step_column: episode, **metrics}
        new = self._columns is None
        if self._columns is None:
            self._columns = list(row)
        with self.csv_path.open("a", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, self._columns, extrasaction="ignore", restval="")
            if new:
                writer.writeheader()
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        numeric = {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, int | float | bool) and v is not None and not math.isnan(float(v))
        }
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(f"{self.tb_prefix}/{key}", value, step=episode)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({f"{self.tb_prefix}/{k}": v for k, v in numeric.items()}, step=episode)

    def log_scalars(self, prefix: str, step: int, metrics: Mapping[str, object]) -> None:
        """Series ``<prefix>/<key>`` at ``step`` in TensorBoard and W&B (not the CSV); None, NaN
        and non-numbers are skipped."""
        numeric = {
            f"{prefix}/{k}": float(v)
            for k, v in metrics.items()
            if isinstance(v, int | float | bool) and not math.isnan(float(v))
        }
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(key, value, step=step)
            self._tb.flush()
        if self._wandb is not None and numeric:
            self._wandb.log(numeric, step=step)

    def log_video(
        self,
        tag: str,
        frames: Sequence[object],
        step: int,
        *,
        mp4: str | Path | None = None,
        fps: int = 10,
    ) -> None:
        """An episode video at ``step``: an animated GIF image ``tag`` in TensorBoard (its image
        dashboard plays it), and in W&B the MP4 file ``mp4`` when one was written."""
        if self._tb is not None and len(frames):
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            from evolve_envs.recording.media import gif_bytes

            if self._tb_media is None:
                self._tb_media = EventFileWriter(
                    str(self.out / "tensorboard"), filename_suffix=".media"
                )
            h, w = frames[0].shape[:2]
            image = summary_pb2.Summary.Image(
                height=int(h),
                width=int(w),
                colorspace=3,
                encoded_image_string=gif_bytes(frames, fps),
            )
            event = event_pb2.Event(wall_time=time.time(), step=int(step))
            event.summary.value.add(tag=tag, image=image)
            self._tb_media.add_event(event)
            self._tb_media.flush()
        if self._wandb is not None and mp4 is not None:
            import wandb

            self._wandb.log({tag: wandb.Video(str(mp4), format="mp4")}, step=step)

    def close(self) -> None:
        """Flush and close the TensorBoard writers and finish the W&B run."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._tb_media is not None:
            self._tb_media.close()
            self._tb_media = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None

    def __enter__(self) -> EpisodeLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
