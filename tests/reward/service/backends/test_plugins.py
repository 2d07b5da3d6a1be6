"""A third-party backend found through the `evolve_envs.reward_backends` entry points.

The plugin is a tiny package plus a `.dist-info` directory with an `entry_points.txt`, put on
`PYTHONPATH` (what `pip install` of a wheel leaves behind). Nothing in this repository names it:
the reward server process finds it by name and serves it over HTTP.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from evolve_envs.reward.service.backends import BACKENDS, ENTRY_POINT_GROUP
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import painted_b64

PLUGIN = '''
"""A constant-critic backend shipped by another package."""
from evolve_envs.reward.service.backends.base import Backend


class ConstantBackend(Backend):
    name = "constant"

    def __init__(self, value: float = 42.0, **kwargs):
        super().__init__(**kwargs)
        self.value = float(value)
        self.model_id = "acme/constant-critic"
        self.model_revision = "v1"

    def critic_batch(self, items):
        return [self.value for _ in items]
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site")
    (root / "acme_reward").mkdir()
    (root / "acme_reward" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = root / "acme_reward-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-reward\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nconstant = acme_reward:ConstantBackend\n"
    )
    return root


def test_builtin_backends_come_from_the_entry_points() -> None:
    from importlib.metadata import entry_points

    declared = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if not declared:
        pytest.skip("this checkout's package metadata predates the entry points (reinstall)")
    for name in ("mock", "vlm", "vlac", "openai"):
        assert declared[name] == BACKENDS[name]
    for name in ("roboreward", "robodopamine", "topreward"):  # presets: registry entries
        assert name not in declared and BACKENDS[name] == declared["openai"]


def test_plugin_is_listed_without_importing_backends(plugin_path: Path) -> None:
    code = (
        "import sys; from evolve_envs.reward.service.backends import BACKENDS;"
        "print(sorted(BACKENDS)); print('torch' in sys.modules, 'acme_reward' in sys.modules)"
    )
    env_path = f"{plugin_path}:{Path(__file__).resolve().parents[4]}"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert "'constant'" in out[0] and "'mock'" in out[0]
    assert out[1] == "False False"  # lazy: listing imports neither the plugin nor torch


def test_plugin_is_served_by_name_over_http(
    plugin_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(plugin_path))
    with EmbeddedService("constant", {"value": 17.5}, startup_timeout=60) as svc:
        caps = httpx.get(svc.url + "/capabilities", trust_env=False).json()
        assert caps["backend"] == "constant" and caps["model_id"] == "acme/constant-critic"
        assert caps["model_revision"] == "v1" and len(caps["config_hash"]) == 16
        body = {"task": "t", "image_a": painted_b64(0), "image_b": painted_b64(50)}
        resp = httpx.post(svc.url + "/pairwise-critic", json=body, trust_env=False)
        assert resp.status_code == 200 and resp.json()["critic"] == 17.5
        assert resp.headers["x-reward-model"] == "acme/constant-critic"
        assert resp.headers["x-reward-backend"] == "constant"
