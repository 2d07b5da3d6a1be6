"""Shipped configs resolve by name from any directory, and ship inside the wheel."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from evolve_envs import ConfigError
from evolve_envs.stack.loading import load_config, resolve_config, shipped_configs

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import json; from evolve_envs.stack.loading import load_config, resolve_config; "
    "cfg = load_config('libero_10', 'fast_dev'); "
    "print(json.dumps([str(resolve_config('libero_10')), cfg.env['suite'], "
    "cfg.reward_model.call_every]))"
)


def test_names_resolve_to_the_shipped_files() -> None:
    names = shipped_configs()
    for suite in ("libero_10", "libero_90", "libero_goal", "libero_object", "libero_spatial"):
        assert names[suite].name == f"{suite}.yaml"
    for preset in ("fast_dev", "long_horizon", "short_precise"):
        assert resolve_config(preset).name == f"{preset}.yaml"
        assert resolve_config(f"presets/{preset}") == resolve_config(preset)
    assert load_config("configs/libero_goal.yaml").env["suite"] == "libero_goal"
    with pytest.raises(ConfigError, match="did you mean 'libero_goal'"):
        load_config("libero_gaol")


def test_names_work_from_another_directory(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    path, suite, call_every = json.loads(out.stdout.splitlines()[-1])
    assert suite == "libero_10" and call_every == 32
    assert Path(path).is_file()


@pytest.mark.slow
def test_configs_ship_in_the_wheel(tmp_path: Path) -> None:
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "evolve_envs", src / "evolve_envs", ignore=ignore)
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w",
         str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    log = build.stdout + build.stderr
    assert "is absent" not in log and "Warning" not in log  # setuptools says nothing
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # one import namespace: nothing but the package and its metadata at the top
    assert {n.split("/")[0] for n in names} == {"evolve_envs", "evolve_envs-0.1.0.dist-info"}
    assert {
        "evolve_envs/configs/libero_10.yaml",
        "evolve_envs/configs/presets/fast_dev.yaml",
    } <= names
    assert {
        "evolve_envs/configs/distrl/reach_place.yaml",
        "evolve_envs/configs/distrl/libero_smoke.yaml",
        "evolve_envs/configs/distrl/reach_place_tuned.yaml",
    } <= names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=run_dir,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    path, suite, call_every = json.loads(out.stdout.splitlines()[-1])
    assert Path(path).is_relative_to(site) and (suite, call_every) == ("libero_10", 32)
