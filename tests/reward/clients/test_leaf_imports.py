"""The clients depend on the wire protocol only, never on the server package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _modules_after(import_line: str) -> set[str]:
    code = f"{import_line}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_clients_do_not_import_the_server_package() -> None:
    mods = _modules_after(
        "import evolve_envs.reward.clients.progress_client,"
        " evolve_envs.reward.clients.video_score_client,"
        " evolve_envs.reward.clients.pickle_scorer_client, evolve_envs.reward.clients.service_check"
    )
    assert "evolve_envs.reward.protocol.wire" in mods
    heavy = {m for m in mods if m.split(".")[0] in {"fastapi", "uvicorn"}}
    heavy |= {m for m in mods if m.startswith("evolve_envs.reward.service")}
    assert not heavy, sorted(heavy)


def test_the_protocol_package_is_a_leaf() -> None:
    mods = _modules_after(
        "import evolve_envs.reward.protocol.wire, evolve_envs.reward.protocol.pickle_codec,"
        " evolve_envs.reward.protocol.critic_math"
    )
    # the package roots on the way in are allowed, and what `import evolve_envs` runs to register
    # the gym ids (the id tables, their limits, and the registration itself: stdlib and numpy);
    # no other project module
    allowed = {
        "evolve_envs",
        "evolve_envs.envs",
        "evolve_envs.envs.headless",
        "evolve_envs.envs.libero_process",
        "evolve_envs.envs.libero_tasks",
        "evolve_envs.envs.registration",
        "evolve_envs.reward",
        "evolve_envs.stack",
        "evolve_envs.stack.registration",
    }
    project = {m for m in mods if m.split(".")[0] == "evolve_envs" and m not in allowed}
    assert project == {m for m in project if m.startswith("evolve_envs.reward.protocol")}


def test_the_clients_import_no_server_plotting_video_or_training_package() -> None:
    """A client-only install (httpx, pydantic, numpy, a JPEG encoder) is enough to import them."""
    mods = _modules_after("import evolve_envs.reward.clients, evolve_envs.reward.protocol")
    optional = {"fastapi", "uvicorn", "starlette", "matplotlib", "imageio", "imageio_ffmpeg"}
    optional |= {"tqdm", "torch", "ray"}
    assert "evolve_envs.reward.clients.video_score_client" in mods
    assert not {m for m in mods if m.split(".")[0] in optional}, sorted(optional & mods)


def test_writing_an_episode_video_without_imageio_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['imageio'] = None\n"  # as if the `video` extra were not installed
        "import numpy as np\n"
        "from evolve_envs.reward.clients.video_score_client import write_mp4\n"
        f"write_mp4({str(tmp_path / 'e.mp4')!r}, [np.zeros((8, 8, 3), np.uint8)], fps=10)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0
    assert "ImportError" in out.stderr
    assert "pip install 'evolve-envs[video]'" in out.stderr
    assert not (tmp_path / "e.mp4").exists()
