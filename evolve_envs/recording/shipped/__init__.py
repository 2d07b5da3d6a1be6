"""Recorded episodes shipped with the package, found by name.

>>> from evolve_envs.recording.episodes import open_recording
>>> recording = open_recording(resolve_recording("shipped"))
>>> len(recording), sum(ep.meta["success"] for ep in recording)
(10, 4)
>>> resolve_recording("runs/rec")
PosixPath('runs/rec')
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

__all__ = ["DEFAULT", "PREFIX", "SHIPPED", "is_shipped", "resolve_recording", "shipped_recording"]

#: The shipped recordings: name -> what they hold.
SHIPPED: dict[str, str] = {
    "reach_place": "ReachPlace controls: 4 successes, 3 distractor and 3 random-action failures",
}
#: The set ``shipped`` alone names.
DEFAULT = "reach_place"
#: How a recording argument names a shipped set: ``shipped`` or ``shipped:<name>``.
PREFIX = "shipped"


def shipped_recording(name: str = DEFAULT) -> Path:
    """The folder of the shipped recording ``name`` (a ``FileNotFoundError`` names a package
    installed without its data)."""
    if name not in SHIPPED:
        raise ValueError(f"no shipped recording {name!r}; shipped: {sorted(SHIPPED)}")
    folder = Path(str(importlib.resources.files(__name__).joinpath(name)))
    if not (folder / "meta.json").is_file():
        raise FileNotFoundError(
            f"the shipped recording {name!r} is missing from {folder} (an install without the "
            "package data; in a source checkout `python scripts/make_controls.py --out DIR` "
            "writes it)"
        )
    return folder


def is_shipped(spec: str | os.PathLike[str]) -> bool:
    """Whether a recording argument names a shipped set (``shipped`` or ``shipped:<name>``)."""
    return isinstance(spec, str) and (spec == PREFIX or spec.startswith(PREFIX + ":"))


def resolve_recording(spec: str | os.PathLike[str]) -> Path:
    """The folder a recording argument names: a shipped set's, or the argument as a path."""
    if not is_shipped(spec):
        return Path(spec)
    _, _, name = str(spec).partition(":")
    return shipped_recording(name or DEFAULT)
