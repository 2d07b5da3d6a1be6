"""The vlac backend without the official VLAC package installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from evolve_envs.reward.service.backends import make_backend
from evolve_envs.reward.service.backends.base import BackendError

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("evo_vlac") is not None, reason="the VLAC package is installed"
)


def test_missing_vlac_package_is_named() -> None:
    with pytest.raises(BackendError, match="official VLAC package 'evo_vlac'.*pip install"):
        make_backend("vlac", ckpt_path="/nonexistent")


def test_server_reports_missing_vlac_package() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evolve_envs.cli.serve",
            "--backend",
            "vlac",
            "--ckpt-path",
            "/x",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "evo_vlac" in proc.stderr and "cannot start backend 'vlac'" in proc.stderr
