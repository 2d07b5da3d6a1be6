"""RLinf's envs import the legacy ``gym``; our processes import it without its banner."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BANNER = "Gym has been unmaintained"


def _stderr(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_gym_is_imported_without_its_banner_and_the_notices_are_put_back():
    pytest.importorskip("gym_notices")
    pytest.importorskip("gym")
    assert BANNER in _stderr("import gym")  # what a bare import prints
    quiet = _stderr(
        "from evolve_envs.integrations.rlinf.quiet_gym import import_gym_quietly\n"
        "assert import_gym_quietly()\n"
        "import gym, gym_notices.notices as t\n"
        "assert t.notices, 'the notice table is put back'\n"
    )
    assert BANNER not in quiet, quiet
