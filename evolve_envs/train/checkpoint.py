"""Atomic training checkpoints in the run directory.

``<run_dir>/checkpoint.pt`` holds one ``torch.save`` payload (policy and optimizer state dicts,
counters, replay metadata, the config). It is written to ``checkpoint.pt.tmp`` first and renamed
over the old one (``os.replace``), so a crash mid-write leaves the previous checkpoint intact.

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> save_checkpoint(d, {"counters": {"updates": 7}}).name
    'checkpoint.pt'
    >>> load_checkpoint(d)["counters"]["updates"]
    7
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CHECKPOINT", "checkpoint_path", "load_checkpoint", "save_atomic", "save_checkpoint"]

CHECKPOINT = "checkpoint.pt"


def checkpoint_path(run_dir: str | os.PathLike[str]) -> Path:
    """Where the run's checkpoint lives."""
    return Path(run_dir) / CHECKPOINT


def save_checkpoint(run_dir: str | os.PathLike[str], payload: dict[str, object]) -> Path:
    """Write ``payload`` atomically (tmp file, fsync, rename); returns the checkpoint's path."""
    return save_atomic(checkpoint_path(run_dir), payload)


def save_atomic(path: Path, payload: dict[str, object]) -> Path:
    """``torch.save`` of ``payload`` to ``path`` atomically (tmp file, fsync, rename): a crash
    leaves the previous file whole; returns ``path``."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        torch.save(payload, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(run_dir: str | os.PathLike[str]) -> dict[str, object]:
    """Read the run's checkpoint; ``FileNotFoundError`` names the directory when there is none."""
    import torch

    path = checkpoint_path(run_dir)
    if not path.is_file():
        raise FileNotFoundError(f"--resume {run_dir}: no {CHECKPOINT} in that directory")
    return torch.load(path, map_location="cpu", weights_only=False)
