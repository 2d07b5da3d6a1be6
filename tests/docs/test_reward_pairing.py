"""Every training config trains on the reward model it expects, wherever the docs start one.

A training config names the reward model it was written for in ``embedded_backend`` and
``embedded_backend_kwargs``: what ``endpoint: embedded`` starts, and what a shared service must
serve when the endpoint points elsewhere. Wherever the docs (a bash block of a page, a comment
block of a config) start a server and run ``evolve-envs train`` together, the server must serve
exactly that model: a Serve config's application (``serve deploy``/``serve run``), or an
``evolve-reward-server``/``evolve-reward-launch`` command. Otherwise a cluster run trains on
something else without a word (the mock's pixel-change rule for ReachPlace, once). Every shipped
training config whose endpoint is not ``embedded`` must be paired somewhere, and the KubeRay
RayJob's training config must expect what its own Serve config deploys.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docs.references import ROOT, command_lines, doc_pages, parsers, source_files

SERVE = re.compile(r"^\s*(?:#\s*)?serve\s+(?:deploy|run)\s+(\S+\.ya?ml)", re.M)
TRAIN_CONFIGS = sorted((ROOT / "evolve_envs" / "configs" / "distrl").glob("*.yaml"))


@dataclass
class Pairing:
    """A training command and the server the same block starts for it."""

    where: str
    train: list[str]
    server: tuple[str, Any]  # ("serve", path) or (program, argv)


def _blocks(path: Path, text: str) -> list[tuple[int, str]]:
    """(line, text) of a page's bash blocks, or of a config's comment blocks."""
    if path.suffix == ".md":
        return [
            (text.count("\n", 0, m.start()) + 2, m.group(1))
            for m in re.finditer(r"^```(?:bash|sh|shell)\n(.*?)^```", text, re.M | re.S)
        ]
    return [
        (text.count("\n", 0, m.start()) + 1, m.group(0))
        for m in re.finditer(r"(?:^[ \t]*#.*\n)+", text, re.M)
    ]


def pairings(path: Path, text: str | None = None) -> list[Pairing]:
    """Every (training command, server) pair that a block of ``path`` shows together."""
    text = path.read_text() if text is None else text
    out = []
    for line, block in _blocks(path, text):
        fenced = Path(path.with_suffix(".md").name)
        cmds = [argv for _, argv, _ in command_lines(fenced, f"```bash\n{block}\n```")]
        trains = [a[1:] for a in cmds if a[0] == "evolve-envs" and a[1:2] == ["train"]]
        servers: list[tuple[str, Any]] = [("serve", m.group(1)) for m in SERVE.finditer(block)]
        servers += [(a[0], a[1:]) for a in cmds if a[0] != "evolve-envs"]
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"
        out += [Pairing(where, t, s) for t in trains for s in servers]
    return out


def expected_model(train_argv: list[str]) -> tuple[Any, dict[str, Any], str]:
    """(backend, kwargs, endpoint) a training command's config expects."""
    from evolve_envs import load_train_config

    args, extra = parsers()["evolve-envs"].parse_known_args(train_argv)
    sources = [str(ROOT / c) if (ROOT / c).is_file() else c for c in args.config]
    cfg = load_train_config(*sources, overrides=[*args.overrides, *extra])
    rm = cfg.reward_model
    return rm.embedded_backend, dict(rm.embedded_backend_kwargs), str(rm.endpoint)


def served_model(server: tuple[str, Any], endpoint: str) -> tuple[str, dict[str, Any]]:
    """(backend, kwargs) a server serves: the Serve app the endpoint names (or the only one)."""
    kind, arg = server
    if kind == "serve":
        apps = yaml.safe_load((ROOT / arg).read_text())["applications"]
        name = endpoint.removeprefix("ray://").strip("/") if endpoint.startswith("ray://") else None
        (app,) = [a for a in apps if name is None or a["name"] == name] if len(apps) > 1 else apps
        return app["args"]["backend"], dict(app["args"].get("backend_kwargs") or {})
    from evolve_envs.reward.service.hosting.serve_options import backend_kwargs

    parser = parsers()[kind]
    args, _ = parser.parse_known_args(arg)
    if kind == "evolve-reward-launch":  # its servers take the same arguments
        args.backend_kwargs_file = None
    return args.backend, backend_kwargs(args, parser)


def mismatches(found: list[Pairing]) -> list[str]:
    problems = []
    for p in found:
        backend, kwargs, endpoint = expected_model(p.train)
        served = served_model(p.server, endpoint)
        if (backend, kwargs) != served:
            problems.append(
                f"{p.where}: `evolve-envs {shlex.join(p.train)}` expects {backend} {kwargs}, "
                f"but the server beside it serves {served[0]} {served[1]}"
            )
    return problems


def _all_pairings() -> list[Pairing]:
    files = [*doc_pages(), *[f for f in source_files() if f.suffix == ".yaml"]]
    return [p for f in files for p in pairings(f)]


def test_every_server_the_docs_start_serves_what_its_training_config_expects() -> None:
    found = _all_pairings()
    served = {p.server[1] if p.server[0] == "serve" else p.server[0] for p in found}
    assert "evolve_envs/configs/serve/cluster.yaml" in served  # the cluster recipe is seen
    assert "evolve-reward-server" in served  # so is LIBERO's VLAC server
    assert mismatches(found) == []


def test_every_training_config_with_a_remote_model_is_paired_with_a_server() -> None:
    from evolve_envs import load_train_config

    found = _all_pairings()
    for path in TRAIN_CONFIGS:
        cfg = load_train_config(path)
        if cfg.stored()["reward_model"].get("endpoint", "embedded") == "embedded":
            continue  # it starts the model it expects itself
        paired = [p for p in found if any(c in (path.stem, f"distrl/{path.stem}") for c in p.train)]
        assert paired, f"{path.name} reaches a reward service that no page starts for it"


def test_the_rayjob_trains_on_the_model_its_serve_config_deploys() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/kuberay/train-rayjob.yaml").read_text()))
    (data,) = [d["data"] for d in docs if d and d.get("kind") == "ConfigMap"]
    train, serve = yaml.safe_load(data["train.yaml"]), yaml.safe_load(data["serve.yaml"])
    (app,) = serve["applications"]
    rm = train["reward_model"]
    assert rm["endpoint"] == f"ray://{app['name']}"
    assert (rm["embedded_backend"], rm["embedded_backend_kwargs"]) == (
        app["args"]["backend"],
        app["args"]["backend_kwargs"],
    )


@pytest.mark.parametrize(
    "serve_config, rule",
    [
        ("evolve_envs/configs/serve/mock.yaml", "change"),
        ("evolve_envs/configs/serve/vlm.yaml", None),
    ],
)
def test_the_check_fails_on_a_server_that_serves_another_model(serve_config, rule) -> None:
    page = ROOT / "docs" / "broken.md"
    text = (
        "```bash\n"
        f"serve deploy {serve_config}\n"
        "evolve-envs train --address auto --config reach_place reward_model.endpoint=ray://reward\n"
        "evolve-reward-server --backend mock --port 8111\n"
        "```\n"
    )
    found = pairings(page, text)
    assert len(found) == 2
    problems = mismatches(found)
    assert len(problems) == 2 and all("expects mock {'rule': 'reach_place'}" in p for p in problems)
    assert (f"serves mock {{'rule': '{rule}'}}" if rule else "serves vlm") in problems[0]
    assert "serves mock {'rule': 'change'}" in problems[1]  # the server's own default rule
