"""Atomic training checkpoints in the run directory, read without running anyone's code.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> save_checkpoint(d, {"counters": {"updates": 7}}).name
'checkpoint.pt'
>>> load_checkpoint(d)["counters"]["updates"]
7
"""

# ``<run_dir>/checkpoint.pt`` holds one ``torch.save`` payload of plain data (policy and optimizer
# state dicts, counters, replay metadata, the RNG state, the config): tensors, numbers, strings,
# lists and dicts only (NumPy arrays become tensors), so it reads back with
# ``torch.load(weights_only=True)``, which builds nothing else and so runs no code. It is written
# to ``checkpoint.pt.tmp`` and renamed over the old one: a crash mid-write leaves the previous one.
# A ``.pt`` the weights-only reader refuses (an older evolve-envs's, or anyone's: its pickle may
# call any function on load) opens only with ``trust=True`` (``--trust-checkpoint``), after a
# warning; otherwise UntrustedCheckpointError says so in one line.

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CHECKPOINT",
    "TRUST_FLAG",
    "UntrustedCheckpointError",
    "checkpoint_path",
    "load_checkpoint",
    "load_pt",
    "plain_data",
    "save_atomic",
    "save_checkpoint",
]

CHECKPOINT = "checkpoint.pt"
#: The command-line flag that opens a ``.pt`` the weights-only reader refuses.
TRUST_FLAG = "--trust-checkpoint"


class UntrustedCheckpointError(ValueError):
    """A ``.pt`` whose pickle needs more than plain data, opened without ``trust=True``.

    >>> str(UntrustedCheckpointError.about(Path("best.pt")))  # doctest: +ELLIPSIS
    'best.pt: its pickle builds arbitrary Python objects, ... --trust-checkpoint ...'
    """

    @classmethod
    def about(cls, path: Path) -> UntrustedCheckpointError:
        return cls(
            f"{path}: its pickle builds arbitrary Python objects, which can run any code when "
            f"opened (an older evolve-envs format, or not a file this package wrote); open it "
            f"only if you trust where it came from: {TRUST_FLAG} (Python: trust=True)"
        )


def checkpoint_path(run_dir: str | os.PathLike[str]) -> Path:
    """Where the run's checkpoint lives."""
    return Path(run_dir) / CHECKPOINT


def plain_data(value: object) -> object:
    """``value`` with NumPy arrays as tensors, NumPy scalars as numbers (weights-only data).

    >>> plain_data({"p": np.zeros(2), "n": np.int64(3), "t": (1, 2.0)})
    {'p': tensor([0., 0.], dtype=torch.float64), 'n': 3, 't': (1, 2.0)}
    """
    import torch

    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value, copy=True))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {k: plain_data(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(plain_data(v) for v in value)
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    return value


def save_checkpoint(run_dir: str | os.PathLike[str], payload: dict[str, object]) -> Path:
    """Write ``payload`` atomically (tmp file, fsync, rename); returns the checkpoint's path."""
    return save_atomic(checkpoint_path(run_dir), payload)


def save_atomic(path: Path, payload: Mapping[str, object]) -> Path:
    """``torch.save`` of ``payload`` as :func:`plain_data` to ``path`` atomically (tmp file,
    fsync, rename): a crash leaves the previous file whole; returns ``path``."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        torch.save(plain_data(payload), fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load_pt(path: str | os.PathLike[str], *, trust: bool = False) -> Any:
    """A ``.pt`` read with ``torch.load(weights_only=True)``; one that needs the full
    unpickler only with ``trust`` (warned on stderr), else :class:`UntrustedCheckpointError`.

    >>> import tempfile, torch
    >>> path = Path(tempfile.mkdtemp()) / "state.pt"
    >>> torch.save({"w": torch.zeros(2), "note": "plain"}, path)
    >>> load_pt(path)["note"]
    'plain'
    """
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        if not trust:
            raise UntrustedCheckpointError.about(Path(path)) from None
    print(
        f"evolve-envs: warning: opening {path} with the full unpickler ({TRUST_FLAG}): "
        "it can run any code its author put in it",
        file=sys.stderr,
        flush=True,
    )
    return torch.load(path, map_location="cpu", weights_only=False)


def load_checkpoint(run_dir: str | os.PathLike[str], *, trust: bool = False) -> dict[str, Any]:
    """Read the run's checkpoint (:func:`load_pt`); ``FileNotFoundError`` names the directory
    when there is none."""
    path = checkpoint_path(run_dir)
    if not path.is_file():
        raise FileNotFoundError(f"--resume {run_dir}: no {CHECKPOINT} in that directory")
    payload = load_pt(path, trust=trust)
    if not isinstance(payload, dict):
        raise ValueError(f"{path}: not a checkpoint (a {type(payload).__name__}, not a dict)")
    return payload
