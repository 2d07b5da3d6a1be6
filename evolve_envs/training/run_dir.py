"""A run directory holds one run: claimed before a run writes, cleared only when asked.

``evolve-envs train --run-dir D`` into a folder that already holds a run's files would mix two
runs (the new ``checkpoint.pt`` beside the old ``best.pt``). :func:`claim_run_dir` refuses that
unless the run continues the one there (``--resume D``) or replaces it (``--overwrite``); a
replaced run's files are first moved aside into one hidden folder, then deleted, so an
interrupted clear never leaves a folder holding part of the old run beside the new one.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "checkpoint.pt").write_bytes(b"old"); _ = (d / "notes.txt").write_text("mine")
    >>> try:
    ...     claim_run_dir(d)
    ... except ValueError as exc:
    ...     print(str(exc).split(";")[0].split(" holds ")[1])
    a run (checkpoint.pt)
    >>> claim_run_dir(d, overwrite=True)
    ['checkpoint.pt']
    >>> sorted(p.name for p in d.iterdir())
    ['notes.txt']
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["RUN_ARTEFACTS", "claim_run_dir", "run_artefacts"]

#: Everything a training run writes into its directory (files and folders).
RUN_ARTEFACTS = (
    "config.yaml",
    "train.log",
    "metrics.csv",
    "tensorboard",
    "checkpoint.pt",
    "checkpoint.pt.tmp",
    "policy.safetensors",
    "policy.safetensors.tmp",
    "best.safetensors",
    "best.safetensors.tmp",
    "best.pt",
    "best.pt.tmp",
    "eval.csv",
    "eval_videos",
    "snapshots",
    "placement.json",
    "placement.json.tmp",
    "summary.json",
    "wandb",
)


def run_artefacts(run_dir: str | Path) -> list[str]:
    """The names of :data:`RUN_ARTEFACTS` present in ``run_dir`` (empty when it is missing)."""
    d = Path(run_dir)
    return [name for name in RUN_ARTEFACTS if (d / name).exists()]


def claim_run_dir(
    run_dir: str | Path, *, resume: bool = False, overwrite: bool = False
) -> list[str]:
    """Check that a run may write into ``run_dir``; with ``overwrite``, clear the files a
    previous run left there (returns their names). Nothing is created here.

    Raises:
        ValueError: ``run_dir`` holds a run and neither ``resume`` nor ``overwrite`` was given,
            or both were, or it is a file.
    """
    d = Path(run_dir)
    if resume and overwrite:
        raise ValueError(
            "--resume continues the run in its folder; --overwrite replaces it: not both"
        )
    if d.exists() and not d.is_dir():
        raise ValueError(f"--run-dir {d} is a file, not a folder")
    found = run_artefacts(d)
    if resume or not found:
        return []
    if not overwrite:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise ValueError(
            f"--run-dir {d} holds a run ({shown}); give --resume {d} to continue it or "
            "--overwrite to replace it"
        )
    aside = d / f".replaced-{os.getpid()}"
    aside.mkdir()
    for name in found:
        os.replace(d / name, aside / name)
    shutil.rmtree(aside)
    return found
