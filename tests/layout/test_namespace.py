"""Everything installed lives under ``evolve_envs``: a user's own modules with generic names
(``wrappers.py``, a ``configs`` package, ``reward_service.py``, ``reward_clients/``) in the working
directory cannot shadow ours."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

#: Each of these raises on import: if any of our code imported it, the command would fail.
HOSTILE = {
    "wrappers.py": "raise ImportError('the user wrappers.py was imported')\n",
    "configs/__init__.py": "raise ImportError('the user configs package was imported')\n",
    "reward_service.py": "raise ImportError('the user reward_service.py was imported')\n",
    "reward_clients/__init__.py": "raise ImportError('the user reward_clients was imported')\n",
    "reward_protocol.py": "raise ImportError('the user reward_protocol.py was imported')\n",
}


@pytest.fixture(scope="module")
def user_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory full of modules named like our old top-level packages."""
    cwd = tmp_path_factory.mktemp("user_project")
    for rel, text in HOSTILE.items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text(text)
    return cwd


def _run(cmd: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    # PYTHONPATH holds the working directory as well, the way a user's own scripts often run
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_import_and_gym_make_with_a_reward_model_ignore_user_modules(user_project: Path) -> None:
    code = (
        "import gymnasium as gym\n"
        "import evolve_envs\n"
        "from evolve_envs import make_env\n"
        "env = gym.make('evolve_envs/ReachPlace-v0',"
        " reward_model={'endpoint': 'embedded', 'embedded_backend': 'mock',"
        " 'embedded_backend_kwargs': {'rule': 'reach_place'}})\n"
        "env.reset(seed=0)\n"
        "_, _, _, _, info = env.step(env.action_space.sample())\n"
        "env.close()\n"
        "import sys\n"
        "print('shadowed' if any(m in sys.modules for m in"
        " ('wrappers', 'configs', 'reward_service', 'reward_clients', 'reward_protocol'))"
        " else 'clean')\n"
    )
    out = _run([sys.executable, "-c", code], user_project)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "clean"


def test_reward_server_help_ignores_user_modules(user_project: Path) -> None:
    exe = shutil.which("evolve-reward-server", path=str(BIN)) or "evolve-reward-server"
    out = _run([exe, "--help"], user_project)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--backend" in out.stdout


@pytest.mark.libero
def test_rollout_with_a_shipped_config_ignores_user_modules(user_project: Path) -> None:
    exe = shutil.which("evolve-envs", path=str(BIN)) or "evolve-envs"
    cmd = [exe, "rollout", "--config", "libero_10", "--episodes", "1", "--max-steps", "8",
           "--no-video", "--no-tensorboard", "--out", str(user_project / "runs")]  # fmt: skip
    out = _run(cmd, user_project, timeout=400)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (user_project / "runs" / "summary.json").is_file()
