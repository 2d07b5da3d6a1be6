"""``deploy/rlinf/reward-tokenless.yaml``: the tokenless reward service for RLinf's API reward
worker, checked by machine. Its objects validate against the Kubernetes schemas (strict); the
server's command line parses with ``evolve-reward-server``'s own parser and passes its
closed-by-default rule only because of ``--no-token-behind-network-policy`` inside a pod; the
NetworkPolicy selects exactly the server's pods and admits only labelled client pods, on the
server's port only. Each check also runs on a broken copy and must reject it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from evolve_envs.reward.service.hosting.serve_options import ServeError, build_parser, server_token

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "rlinf" / "reward-tokenless.yaml"
K8S_VERSION = "1.30"
CLIENT_LABEL = {"evolve-envs/reward-client": "true"}


def _docs() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}


def _container(docs: dict[str, dict]) -> dict:
    return docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def problems(docs: dict[str, dict]) -> list[str]:
    """What keeps the tokenless service from being closed (empty: closed)."""
    found = []
    if set(docs) != {"Deployment", "Service", "NetworkPolicy"}:
        return [f"objects {sorted(docs)}: a Deployment, a Service and a NetworkPolicy"]
    command = _container(docs)["command"]
    if "--no-token-behind-network-policy" not in command:
        found.append("the server runs without --no-token-behind-network-policy")
    args = build_parser().parse_args(command[1:])
    port = args.port
    pod_labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    policy = docs["NetworkPolicy"]["spec"]
    selected = policy["podSelector"].get("matchLabels") or {}
    if not selected or any(pod_labels.get(k) != v for k, v in selected.items()):
        found.append("the NetworkPolicy does not select the server's pods")
    if "Ingress" not in policy.get("policyTypes", []):
        found.append("the NetworkPolicy does not restrict ingress")
    for rule in policy.get("ingress", []):
        peers = rule.get("from") or [{}]
        if any(p.get("podSelector", {}).get("matchLabels") != CLIENT_LABEL for p in peers):
            found.append(f"an ingress rule admits other peers than the client pods: {peers}")
        ports = [p.get("port") for p in rule.get("ports") or [{}]]
        if ports != [port]:
            found.append(f"an ingress rule opens ports {ports}, not the server's {port}")
    return found


def test_objects_validate() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (test extra)")
    for doc in _docs().values():
        kv.validate(doc, K8S_VERSION, strict=True)


def test_the_tokenless_service_is_closed_by_its_policy() -> None:
    assert problems(_docs()) == []


def test_the_command_passes_the_rule_in_a_pod_only(monkeypatch: pytest.MonkeyPatch) -> None:
    command = _container(_docs())["command"]
    for name in ("EVOLVE_REWARD_TOKEN", "EVOLVE_REWARD_TOKEN_FILE", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ServeError, match="not in a Kubernetes pod"):
        server_token(build_parser().parse_args(command[1:]))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert server_token(build_parser().parse_args(command[1:])) is None


def _open_to_all(d: dict) -> None:
    d["NetworkPolicy"]["spec"]["ingress"] = [{"from": [{"namespaceSelector": {}}]}]


def _wrong_selector(d: dict) -> None:
    d["NetworkPolicy"]["spec"]["podSelector"] = {"matchLabels": {"app": "other"}}


def _no_flag(d: dict) -> None:
    _container(d)["command"].remove("--no-token-behind-network-policy")


def _extra_port(d: dict) -> None:
    d["NetworkPolicy"]["spec"]["ingress"][0]["ports"].append({"protocol": "TCP", "port": 8265})


def _no_policy(d: dict) -> None:
    del d["NetworkPolicy"]


@pytest.mark.parametrize(
    "breakage", [_open_to_all, _wrong_selector, _no_flag, _extra_port, _no_policy]
)
def test_a_broken_copy_is_rejected(breakage) -> None:
    docs = copy.deepcopy(_docs())
    breakage(docs)
    assert problems(docs)
