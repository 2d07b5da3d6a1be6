"""The clients depend on the wire protocol only, never on the server package."""

from __future__ import annotations

import json
import subprocess
import sys


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
