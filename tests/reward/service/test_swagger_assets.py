"""The /docs page works offline, and the standalone mock server starts like the embedded one."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from evolve_envs.reward.service.hosting.serve_options import MOCK_DEFAULTS
from evolve_envs.stack.config import RewardModelConfig
from tests.helpers.svc_helpers import free_port


def test_docs_page_loads_swagger_ui_from_the_service(client: httpx.Client) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    refs = re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", page.text)
    assets = [r for r in refs if not r.startswith("#")]
    assert any(r.endswith("swagger-ui-bundle.js") for r in assets)
    assert any(r.endswith("swagger-ui.css") for r in assets)
    for ref in assets:
        assert ref.startswith("/"), f"/docs loads {ref} from another host"
        resp = client.get(ref)
        assert resp.status_code == 200 and len(resp.content) > 0, ref
    bundle = next(r for r in assets if r.endswith("swagger-ui-bundle.js"))
    assert len(client.get(bundle).content) > 100_000  # the real Swagger UI, not a placeholder


def test_standalone_mock_uses_the_embedded_rule_and_says_so(tmp_path: Path) -> None:
    assert RewardModelConfig().embedded_backend_kwargs == MOCK_DEFAULTS
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evolve_envs.cli.serve", "--backend", "mock",
             "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "evolve-reward-server: backend" not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        line = next(x for x in log.read_text().splitlines() if "evolve-reward-server: backend" in x)
        assert "'mock'" in line and "rule='change'" in line and f":{port}" in line
    finally:
        proc.terminate()
        proc.wait(timeout=10)
