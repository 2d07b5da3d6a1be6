"""Recorded episodes shipped with the package, found by name.

``reach_place``: 10 episodes of the synthetic ReachPlace task (``evolve_envs/ReachPlace-v0``,
64 x 64 frames, about 0.2 MB): 4 with the task done (successes), 3 with only the distractor
dragged onto the target and 3 of random actions (failures). Each index line names its
``behaviour``. They are the controls of ``evolve-envs calibrate``: on them a right reward model
(``mock:reach_place``) must rank above a random one and a gameable one
(``evolve-envs calibrate shipped --service mock:reach_place --service mock:random``).
``python scripts/make_controls.py`` (in a source checkout) writes them again, the same way.

A recording argument ``shipped`` (the default set) or ``shipped:<name>`` names one of them; any
other argument is a folder (a folder called ``shipped`` is written ``./shipped``).

Example:
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
            "package data; `python scripts/make_controls.py --out DIR` writes it from a checkout)"
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
