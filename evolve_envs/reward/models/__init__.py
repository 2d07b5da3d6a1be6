"""Progress models fitted here and shipped with the package, found by name.

A model directory is what ``evolve-envs fit-reward`` writes (``config.json``, ``model.safetensors``,
the card ``README.md``, ``report.json``); the ``fitted`` backend serves it. ``ckpt_path:
shipped:<name>`` names a shipped one, anything else is a path.

>>> sorted(SHIPPED_MODELS)
['libero_object']
>>> resolve_model("runs/rp-model")
'runs/rp-model'
>>> resolve_model("shipped:libero_object").endswith("libero_object")
True
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

__all__ = ["PREFIX", "SHIPPED_MODELS", "resolve_model", "shipped_model"]

#: The shipped models: name -> what they judge.
SHIPPED_MODELS: dict[str, str] = {
    "libero_object": (
        "LIBERO-Object progress from the agentview camera (64x64) and the task text, fitted on "
        "scripted demonstrations and rule-made failures (its README.md says how)"
    ),
}
#: How a ``ckpt_path`` names a shipped model: ``shipped:<name>``.
PREFIX = "shipped:"


def shipped_model(name: str) -> Path:
    """The directory of the shipped model ``name`` (``FileNotFoundError`` names an install
    without the package data)."""
    if name not in SHIPPED_MODELS:
        raise ValueError(f"no shipped model {name!r}; shipped: {sorted(SHIPPED_MODELS)}")
    folder = Path(str(importlib.resources.files(__name__).joinpath(name)))
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"the shipped model {name!r} is missing from {folder} (an install without the "
            "package data)"
        )
    return folder


def resolve_model(spec: str | os.PathLike[str]) -> str:
    """A ``ckpt_path`` as a directory: ``shipped:<name>`` is a shipped model's, else the path."""
    text = os.fspath(spec)
    if text.startswith(PREFIX):
        return str(shipped_model(text[len(PREFIX) :]))
    return text
