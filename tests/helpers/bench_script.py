"""Run one ``bench/`` script end to end in a child process, as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str | Path, timeout: float = 500) -> str:
    """``python bench/<script> <args>`` in the checkout: its stdout, or a failure with its tail."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout
