"""Import RLinf's legacy ``gym`` without its "unmaintained" banner in every worker.

>>> import_gym_quietly() in (True, False)
True
"""

from __future__ import annotations

import sys

__all__ = ["import_gym_quietly"]


def import_gym_quietly() -> bool:
    """Import ``gym`` with its notice held back; returns whether ``gym`` is imported."""
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
