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
        "import reward_clients.progress_client, reward_clients.video_score_client, "
        "reward_clients.pickle_scorer_client, reward_clients.service_check"
    )
    assert "reward_protocol.wire" in mods
    heavy = {m for m in mods if m.split(".")[0] in {"reward_service", "fastapi", "uvicorn"}}
    assert not heavy, sorted(heavy)


def test_the_protocol_package_is_a_leaf() -> None:
    mods = _modules_after(
        "import reward_protocol.wire, reward_protocol.pickle_codec, reward_protocol.progress"
    )
    project = {"evolve_envs", "wrappers", "reward_clients", "reward_service"}
    assert not {m for m in mods if m.split(".")[0] in project}


def test_the_clients_import_no_server_plotting_video_or_training_package() -> None:
    """A client-only install (httpx, pydantic, numpy, a JPEG encoder) is enough to import them."""
    mods = _modules_after("import reward_clients, reward_protocol")
    optional = {"fastapi", "uvicorn", "starlette", "matplotlib", "imageio", "imageio_ffmpeg"}
    optional |= {"tqdm", "torch", "ray"}
    assert "reward_clients.video_score_client" in mods
    assert not {m for m in mods if m.split(".")[0] in optional}, sorted(optional & mods)


def test_writing_an_episode_video_without_imageio_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['imageio'] = None\n"  # as if the `video` extra were not installed
        "import numpy as np\n"
        "from reward_clients.video_score_client import write_mp4\n"
        f"write_mp4({str(tmp_path / 'e.mp4')!r}, [np.zeros((8, 8, 3), np.uint8)], fps=10)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0
    assert "ImportError" in out.stderr
    assert "pip install 'evolve-envs[video]'" in out.stderr
    assert not (tmp_path / "e.mp4").exists()
