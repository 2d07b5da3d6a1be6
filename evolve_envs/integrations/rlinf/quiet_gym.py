"""Import the legacy ``gym`` package without its "unmaintained" banner.

RLinf's env modules import ``gym`` (0.26), whose ``__init__`` prints a multi-line notice on
stderr in every process that imports it (each Ray worker, each env subprocess). Our code uses
Gymnasium only; the notice says nothing about this run. :func:`import_gym_quietly` imports
``gym`` once with the notice table of ``gym_notices`` emptied for the import, then puts the table
back; everything else ``gym`` prints, and every warning, is left alone. Call it before importing
RLinf (this package's modules do).

Example:
    >>> import_gym_quietly() in (True, False)
    True
"""

from __future__ import annotations

import sys

__all__ = ["import_gym_quietly"]


def import_gym_quietly() -> bool:
    """Import ``gym`` with its version notice held back; returns whether ``gym`` is imported.
    A no-op where ``gym`` is already imported or not installed."""
    if "gym" in sys.modules:
        return True
    try:
        import gym_notices.notices as table
    except ImportError:
        table = None
    saved = dict(table.notices) if table is not None else {}
    if table is not None:
        table.notices.clear()
    try:
        import gym  # noqa: F401
    except ImportError:
        return False
    finally:
        if table is not None:
            table.notices.update(saved)
    return True
