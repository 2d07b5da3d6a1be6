"""README snippets run as pasted: each is extracted and run in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def snippet(heading: str) -> str:
    """The first ```python block after the README heading ``heading``."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n{heading}\n")
    found = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert found, heading
    return found.group(1)


def run_snippet(code: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_clients_snippet_runs_as_pasted() -> None:
    proc = run_snippet(snippet("### Clients"), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = proc.stdout.strip().splitlines()[-2:]
    assert " True False " in first  # res.value, res.ok, res.fallback, res.latency_s
    assert second  # the future's value


@pytest.mark.libero
@pytest.mark.slow
def test_from_yaml_snippet_runs_as_pasted() -> None:
    proc = run_snippet(snippet("### From YAML"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
