"""What LIBERO, robosuite and the GL stack print: stdout stays the program's, stderr stays quiet."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.libero


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_tasks_listing_is_all_that_goes_to_stdout() -> None:
    from libero.libero import benchmark

    bench = benchmark.get_benchmark_dict()["libero_10"]()
    names = bench.get_task_names()
    texts = set(names) | {bench.get_task(i).language for i in range(len(names))}

    proc = _run(
        "from evolve_envs.cli.main import main; raise SystemExit(main(['tasks', 'libero_10']))"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    strays = [line for line in lines if not any(text in line for text in texts)]
    assert strays == []
    assert all(any(line.endswith(name) for line in lines) for name in names)


def test_library_print_is_logged_not_lost() -> None:
    code = (
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from evolve_envs.envs.libero import LiberoEnv\n"
        "LiberoEnv('libero_goal', 0)\n"
    )
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Applying task order" not in proc.stdout
    assert "INFO:evolve_envs.envs.libero:[info] Applying task order" in proc.stderr


@pytest.mark.slow
def test_env_left_open_exits_quietly() -> None:
    """No close(): no EGL traceback at exit, no robosuite macro notice; other warnings show."""
    code = (
        "import logging\n"
        "from evolve_envs.envs.libero import LiberoEnv\n"
        "env = LiberoEnv('libero_10', 0, image_size=32, num_settle_steps=0)\n"
        "obs, _ = env.reset(seed=0)\n"
        "logging.getLogger('robosuite_logs').warning('another robosuite warning')\n"
        "print('reset', obs['agentview_image'].shape)\n"
    )
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "reset (32, 32, 3)\n"
    assert "Traceback" not in proc.stderr
    assert "EGLError" not in proc.stderr
    assert "macro file" not in proc.stderr
    assert "another robosuite warning" in proc.stderr
