"""The KubeRay manifests of ``deploy/kuberay``, checked by machine (no Kubernetes cluster needed).

* The Serve config of the RayService (``serveConfigV2``) and the one the training RayJob deploys
  parse with Ray's own :class:`ray.serve.schema.ServeDeploySchema`, and their application
  arguments build with :func:`evolve_envs.reward.service.hosting.ray_serve.build_app`; so do the
  shipped
  ``evolve_envs/configs/serve/*.yaml``.
* Every pod template, wrapped in a ``Pod``, and every plain Kubernetes object validates against
  the Kubernetes OpenAPI schemas shipped offline by ``kubernetes-validate`` (strict: an unknown
  field is an error).
* The KubeRay resources validate against :class:`RayJob` / :class:`RayService` below, a model
  of the ``ray.io/v1`` fields written from KubeRay's API reference (``docs/reference/api.md``):
  unknown fields, ``rayStartParams`` values that are not strings, a worker group without a name or
  with ``replicas`` outside ``[minReplicas, maxReplicas]`` are errors.
* Consistency: every group advertises the custom resource of its role; the worker groups hold
  what the training config asks for (``workers.resources`` x ``num_workers``, the learner's
  ``learner.resources``, CPUs, GPUs, RAM for ``num_envs`` simulators each) and what the Serve app
  asks for (``resources``, GPUs, CPUs per replica, up to its maximum replica count); ``num-gpus``
  equals the container's ``nvidia.com/gpu`` limit; the model weights are on a mounted volume.
* Closed by default: no shipped YAML (manifests, Serve configs, training configs) holds a literal
  token; every Ray cluster has a NetworkPolicy that admits its own pods, the trainer pods to the
  reward service port only and the KubeRay operator (and a RayJob's submitter) to the dashboard
  only; the dashboard and the Ray client port are behind Ray's token authentication and declared
  nowhere else; the reward replicas and their clients read the bearer token from a Secret.

Each check also runs on a broken copy of a manifest and must reject it.
"""

from __future__ import annotations

import copy
import json
import math
import re
import shlex
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, model_validator

ROOT = Path(__file__).resolve().parents[2]
KUBERAY = ROOT / "deploy" / "kuberay"
SERVE_CONFIGS = ROOT / "evolve_envs" / "configs" / "serve"
#: the Kubernetes version the pod templates are validated against (its OpenAPI schemas)
K8S_VERSION = "1.30"
#: the node roles: a worker group named after one advertises that custom Ray resource
ROLES = ("sim", "learner", "reward")
#: RAM one LIBERO simulator env takes, and what a rollout worker takes besides its envs
SIM_ENV_BYTES = 2.5e9
WORKER_OVERHEAD_BYTES = 1.5e9
#: keys of the training config that the cluster placement adds (validated by the config model
#: once it has them; until then checked here from the manifest)
PLACEMENT_KEYS = {
    "workers": ("resources", "scheduling"),
    "learner": ("placement", "num_cpus", "resources"),
}


# -------------------------------------------------------------------------------------------
# the manifests


def _documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KUBERAY / name).read_text()) if d]


def _find(docs: list[dict], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


@pytest.fixture()
def rayjob_docs() -> list[dict[str, Any]]:
    return _documents("train-rayjob.yaml")


@pytest.fixture()
def rayjob(rayjob_docs: list[dict]) -> dict[str, Any]:
    return _find(rayjob_docs, "RayJob")


@pytest.fixture()
def rayservice() -> dict[str, Any]:
    return _find(_documents("reward-rayservice.yaml"), "RayService")


def _cluster_spec(resource: dict) -> dict[str, Any]:
    spec = resource["spec"]
    return spec["rayClusterSpec"] if resource["kind"] == "RayJob" else spec["rayClusterConfig"]


def _groups(cluster: dict) -> list[tuple[str, dict]]:
    """``(name, group)`` for the head group (named ``head``) and each worker group."""
    head = [("head", cluster["headGroupSpec"])]
    return head + [(g["groupName"], g) for g in cluster.get("workerGroupSpecs", [])]


# -------------------------------------------------------------------------------------------
# KubeRay's ray.io/v1 resources, written from KubeRay's API reference (the fields used here and
# their neighbours; anything else is an error, as a typo would be)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow")  # the full ObjectMeta is Kubernetes' (checked there)

    name: str = Field(pattern=DNS_LABEL, max_length=63)


class PodTemplateSpec(_Strict):
    metadata: dict[str, Any] | None = None
    spec: dict[str, Any]  # a PodSpec: validated against Kubernetes' schema (test below)


class AutoscalerOptions(_Strict):
    resources: dict[str, Any] | None = None
    image: str | None = None
    imagePullPolicy: Literal["Always", "Never", "IfNotPresent"] | None = None
    securityContext: dict[str, Any] | None = None
    idleTimeoutSeconds: int | None = Field(default=None, ge=0)
    upscalingMode: Literal["Default", "Aggressive", "Conservative"] | None = None
    version: Literal["v1", "v2"] | None = None
    env: list[dict[str, Any]] | None = None
    envFrom: list[dict[str, Any]] | None = None
    volumeMounts: list[dict[str, Any]] | None = None


class HeadGroupSpec(_Strict):
    template: PodTemplateSpec
    headService: dict[str, Any] | None = None
    enableIngress: bool | None = None
    rayStartParams: dict[str, StrictStr] = Field(default_factory=dict)
    serviceType: Literal["ClusterIP", "NodePort", "LoadBalancer"] | None = None


class WorkerGroupSpec(_Strict):
    suspend: bool | None = None
    groupName: str = Field(pattern=DNS_LABEL, max_length=63)
    replicas: int = Field(default=0, ge=0)
    minReplicas: int = Field(default=0, ge=0)
    maxReplicas: int = Field(default=2**31 - 1, ge=0)
    idleTimeoutSeconds: int | None = Field(default=None, ge=0)
    rayStartParams: dict[str, StrictStr] = Field(default_factory=dict)
    template: PodTemplateSpec
    scaleStrategy: dict[str, Any] | None = None
    numOfHosts: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> WorkerGroupSpec:
        if not self.minReplicas <= self.replicas <= self.maxReplicas:
            raise ValueError(
                f"group {self.groupName}: replicas {self.replicas} outside "
                f"[minReplicas {self.minReplicas}, maxReplicas {self.maxReplicas}]"
            )
        return self


class AuthOptions(_Strict):
    mode: Literal["disabled", "token"] | None = None
    secretName: str | None = None
    enableK8sTokenAuth: bool | None = None


class RayClusterSpec(_Strict):
    suspend: bool | None = None
    managedBy: str | None = None
    authOptions: AuthOptions | None = None
    autoscalerOptions: AutoscalerOptions | None = None
    headServiceAnnotations: dict[str, str] | None = None
    enableInTreeAutoscaling: bool | None = None
    gcsFaultToleranceOptions: dict[str, Any] | None = None
    headGroupSpec: HeadGroupSpec
    rayVersion: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    workerGroupSpecs: list[WorkerGroupSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_groups(self) -> RayClusterSpec:
        names = [g.groupName for g in self.workerGroupSpecs]
        if len(names) != len(set(names)):
            raise ValueError(f"worker group names repeat: {names}")
        return self


class RayJobSpec(_Strict):
    activeDeadlineSeconds: int | None = Field(default=None, gt=0)
    backoffLimit: int | None = Field(default=None, ge=0)
    rayClusterSpec: RayClusterSpec | None = None
    submitterPodTemplate: PodTemplateSpec | None = None
    metadata: dict[str, str] | None = None
    clusterSelector: dict[str, str] | None = None
    submitterConfig: dict[str, Any] | None = None
    managedBy: str | None = None
    deletionStrategy: dict[str, Any] | None = None
    entrypoint: str = Field(min_length=1)
    runtimeEnvYAML: str | None = None
    jobId: str | None = None
    submissionMode: Literal["K8sJobMode", "HTTPMode", "InteractiveMode"] | None = None
    entrypointResources: str | None = None
    entrypointNumCpus: float | None = None
    entrypointNumGpus: float | None = None
    ttlSecondsAfterFinished: int | None = Field(default=None, ge=0)
    shutdownAfterJobFinishes: bool | None = None
    suspend: bool | None = None
    schedule: str | None = None

    @model_validator(mode="after")
    def _one_cluster(self) -> RayJobSpec:
        if (self.rayClusterSpec is None) == (self.clusterSelector is None):
            raise ValueError("a RayJob needs exactly one of rayClusterSpec and clusterSelector")
        return self


class RayServiceSpec(_Strict):
    serveService: dict[str, Any] | None = None
    upgradeStrategy: dict[str, Any] | None = None
    serveConfigV2: str = Field(min_length=1)
    rayClusterConfig: RayClusterSpec
    excludeHeadPodFromServeSvc: bool | None = None


class RayJob(_Strict):
    apiVersion: Literal["ray.io/v1"]
    kind: Literal["RayJob"]
    metadata: ObjectMeta
    spec: RayJobSpec


class RayService(_Strict):
    apiVersion: Literal["ray.io/v1"]
    kind: Literal["RayService"]
    metadata: ObjectMeta
    spec: RayServiceSpec


# -------------------------------------------------------------------------------------------
# reading the manifests' numbers


def _quantity(text: Any) -> float:
    """A Kubernetes quantity (``56Gi``, ``500m``, ``4``) as a number."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T|m)?", str(text))
    assert m, f"not a quantity: {text!r}"
    scale = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}  # fmt: skip
    return float(m.group(1)) * scale[m.group(2)]


def custom_resources(params: dict[str, str]) -> dict[str, float]:
    """``rayStartParams.resources`` (KubeRay's quoted JSON, ``'"{\\"sim\\": 4}"'``) as a dict."""
    text = params.get("resources")
    if text is None:
        return {}
    inner = text.strip()
    assert inner.startswith('"') and inner.endswith('"'), f"resources not quoted: {text!r}"
    value = json.loads(inner[1:-1].replace('\\"', '"'))
    assert isinstance(value, dict), f"resources is not a mapping: {text!r}"
    return {str(k): float(v) for k, v in value.items()}


def _container(group: dict) -> dict[str, Any]:
    return group["template"]["spec"]["containers"][0]  # KubeRay runs Ray in the first container


def node_resources(group: dict) -> dict[str, float]:
    """What one pod of ``group`` gives Ray: CPU, GPU, custom resources, and its RAM limit."""
    params = group.get("rayStartParams", {})
    limits = _container(group).get("resources", {}).get("limits", {})
    cpu = float(params["num-cpus"]) if "num-cpus" in params else _quantity(limits.get("cpu", 0))
    return {
        "CPU": cpu,
        "GPU": float(params.get("num-gpus", 0)),
        "memory": _quantity(limits.get("memory", 0)),
        "object_store": float(params.get("object-store-memory", 0)),
        **custom_resources(params),
    }


def gpu_problems(cluster: dict) -> list[str]:
    """``num-gpus`` against ``nvidia.com/gpu``, requests against limits, CPUs against the pod's."""
    problems = []
    for name, group in _groups(cluster):
        params = group.get("rayStartParams", {})
        res = _container(group).get("resources", {})
        limit = _quantity(res.get("limits", {}).get("nvidia.com/gpu", 0))
        request = res.get("requests", {}).get("nvidia.com/gpu")
        if float(params.get("num-gpus", 0)) != limit:
            problems.append(f"{name}: num-gpus {params.get('num-gpus', 0)} != GPU limit {limit}")
        if request is not None and _quantity(request) != limit:
            problems.append(f"{name}: nvidia.com/gpu request {request} != limit {limit}")
        cpu_limit = res.get("limits", {}).get("cpu")
        if cpu_limit is None or "memory" not in res.get("limits", {}):
            problems.append(f"{name}: no cpu or memory limit")
        elif "num-cpus" in params and float(params["num-cpus"]) > _quantity(cpu_limit):
            problems.append(f"{name}: num-cpus {params['num-cpus']} > cpu limit {cpu_limit}")
    return problems


def role_problems(cluster: dict) -> list[str]:
    """A worker group named after a role advertises that custom resource (and no other role's)."""
    problems = []
    for name, group in _groups(cluster):
        roles = {r for r in custom_resources(group.get("rayStartParams", {})) if r in ROLES}
        want = {name} if name in ROLES else set()
        if roles != want:
            problems.append(f"{name}: advertises roles {sorted(roles)}, expected {sorted(want)}")
    return problems


def _fits(node: dict[str, float], ask: dict[str, float]) -> int:
    """How many of ``ask`` one node holds."""
    counts = [math.floor(node.get(k, 0.0) / v + 1e-9) for k, v in ask.items() if v > 0]
    return min(counts) if counts else 0


def _ask(cpus: Any, gpus: Any, resources: dict | None) -> dict[str, float]:
    """What one task or actor asks Ray for: CPUs, GPUs and custom resources."""
    custom = {str(k): float(v) for k, v in (resources or {}).items()}
    return {"CPU": float(cpus), "GPU": float(gpus), **custom}


def train_problems(cluster: dict, train: dict) -> list[str]:
    """Do the groups hold the training config's rollout workers and learner?"""
    problems = []
    workers, learner = train.get("workers", {}), train.get("learner", {})
    worker_ask = _ask(
        workers.get("num_cpus", 0.5), workers.get("num_gpus", 0.0), workers.get("resources")
    )
    if not set(worker_ask) & set(ROLES):
        problems.append("workers.resources names no node role: workers would land anywhere")
    need = int(workers.get("num_workers", 2))
    room = 0
    for name, group in _groups(cluster):
        node = node_resources(group)
        per_pod = _fits(node, worker_ask)
        if per_pod == 0:
            continue
        room += per_pod * int(group.get("replicas", 1))
        envs = int(workers.get("num_envs", 1))
        ram = per_pod * (envs * SIM_ENV_BYTES + WORKER_OVERHEAD_BYTES) + node["object_store"]
        if node["memory"] < ram:
            problems.append(
                f"{name}: {per_pod} workers x {envs} envs need {ram / 2**30:.1f} GiB, "
                f"the pod has {node['memory'] / 2**30:.1f} GiB"
            )
    if room < need:
        problems.append(f"the groups hold {room} rollout workers, the config starts {need}")
    if learner.get("placement") == "cluster":
        learner_ask = _ask(
            learner.get("num_cpus", 1), learner.get("num_gpus", 0), learner.get("resources")
        )
        if not set(learner_ask) & set(ROLES):
            problems.append("learner.resources names no node role")
        hosts = [g for _, g in _groups(cluster) if _fits(node_resources(g), learner_ask)]
        if not any(g.get("replicas", 1) >= 1 for g in hosts):
            problems.append(f"no group holds the learner ({learner_ask})")
    return problems


def serve_problems(cluster: dict, serve_config: dict) -> list[str]:
    """Do the groups hold every Serve application's replicas, up to their maximum count, and do
    the pods that may hold them mount the model weights?"""
    problems = []
    autoscaled = bool(cluster.get("enableInTreeAutoscaling"))
    for app in serve_config["applications"]:
        args = app.get("args", {})
        ask = _ask(args.get("num_cpus", 1.0), args.get("num_gpus", 0.0), args.get("resources"))
        scaling = args.get("autoscaling") or {}
        most = int(scaling.get("max_replicas", args.get("replicas", 1)))
        room, hosts = 0, []
        for name, group in _groups(cluster):
            per_pod = _fits(node_resources(group), ask)
            if per_pod:
                pods = group.get("maxReplicas" if autoscaled else "replicas", 1)
                room += per_pod * int(pods)
                hosts.append((name, group))
        if not hosts:
            problems.append(f"app {app['name']}: no group holds a replica ({ask})")
        elif room < most:
            problems.append(f"app {app['name']}: room for {room} replicas, it may run {most}")
        ckpt = (args.get("backend_kwargs") or {}).get("ckpt_path")
        for name, group in hosts if ckpt else ():
            mounts = _container(group).get("volumeMounts", [])
            if not any(ckpt.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts):
                problems.append(f"{name}: the model {ckpt} is on no mounted volume")
    return problems


# -------------------------------------------------------------------------------------------
# the entrypoint and the files it reads


def _commands(entrypoint: str) -> list[list[str]]:
    return [shlex.split(part) for part in entrypoint.split("&&")]


def train_invocation(rayjob: dict) -> list[str]:
    """The argument list after ``evolve-envs`` of the entrypoint's training command."""
    found = [
        c for c in _commands(rayjob["spec"]["entrypoint"]) if c[:2] == ["evolve-envs", "train"]
    ]
    assert len(found) == 1, "the entrypoint runs no (or several) `evolve-envs train`"
    return found[0][1:]


def mounted_file(rayjob: dict, docs: list[dict], path: str) -> str:
    """The text of the ConfigMap key the head pod sees at ``path``."""
    head = _cluster_spec(rayjob)["headGroupSpec"]["template"]["spec"]
    volumes = {v["name"]: v for v in head.get("volumes", [])}
    for mount in head["containers"][0].get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix) and "configMap" in volumes.get(mount["name"], {}):
            name = volumes[mount["name"]]["configMap"]["name"]
            cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
            assert cm, f"{path}: ConfigMap {name} is not in the manifest"
            return cm[0]["data"][path.removeprefix(prefix)]
    raise AssertionError(f"{path}: not on a ConfigMap mounted in the head pod")


def train_config(rayjob: dict, docs: list[dict]) -> dict[str, Any]:
    """The training config the RayJob runs: its ``--config`` file and ``KEY=VALUE`` overrides."""
    from evolve_envs.cli.main import _build_parser
    from evolve_envs.stack.loading import merge, parse_override

    args = _build_parser().parse_args(train_invocation(rayjob))
    assert args.address == "auto", "the driver must join the cluster (--address auto)"
    assert len(args.config) == 1
    data = yaml.safe_load(mounted_file(rayjob, docs, args.config[0]))
    for text in args.overrides:
        data = merge(data, parse_override(text))
    return data


def serve_deployed_by(rayjob: dict, docs: list[dict]) -> dict[str, Any]:
    found = [c for c in _commands(rayjob["spec"]["entrypoint"]) if c[:2] == ["serve", "deploy"]]
    assert len(found) == 1, "the entrypoint deploys no (or several) Serve configs"
    return yaml.safe_load(mounted_file(rayjob, docs, found[0][2]))


# -------------------------------------------------------------------------------------------
# (a) the Serve configs: Ray's schema and the app builder


def check_serve_config(config: dict) -> None:
    """Raises unless ``config`` is a valid Serve config whose applications all build."""
    pytest.importorskip("ray.serve", reason="ray[serve] is not importable (serve extra)")
    from ray.serve.schema import ServeDeploySchema

    from evolve_envs.reward.service.hosting.ray_serve import build_app

    schema = ServeDeploySchema.model_validate(config)
    assert schema.applications, "no applications"
    for app in schema.applications:
        assert app.import_path == "evolve_envs.reward.service.hosting.ray_serve:build_app"
        built = build_app(app.args)
        options = built._bound_deployment.ray_actor_options
        assert options.get("resources", {}) == {
            k: float(v) for k, v in (app.args.get("resources") or {}).items()
        }


@pytest.mark.parametrize("name", ["cluster.yaml", "vlm.yaml", "mock.yaml"])
def test_shipped_serve_configs_validate(name: str) -> None:
    check_serve_config(yaml.safe_load((SERVE_CONFIGS / name).read_text()))


def test_rayservice_serve_config_validates_and_matches_the_rayjob(
    rayservice: dict, rayjob: dict, rayjob_docs: list[dict]
) -> None:
    config = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    check_serve_config(config)
    assert serve_deployed_by(rayjob, rayjob_docs) == config  # one reward service, two places
    # the cluster config's `reward` application, with the VLM on GPUs
    cluster = yaml.safe_load((SERVE_CONFIGS / "cluster.yaml").read_text())
    (app,), (base,) = config["applications"], cluster["applications"]
    assert {k: app[k] for k in ("name", "route_prefix", "import_path")} == {
        k: base[k] for k in ("name", "route_prefix", "import_path")
    }
    assert app["args"]["resources"] == base["args"]["resources"] == {"reward": 1}
    assert app["args"]["backend"] == "vlm" and app["args"]["num_gpus"] >= 1


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param(lambda c: c["applications"][0].pop("import_path"), id="no-import-path"),
        pytest.param(lambda c: c["applications"].append(copy.deepcopy(c["applications"][0])),
                     id="two-apps-one-name"),
        pytest.param(lambda c: c["http_options"].update(port="http"), id="bad-port"),
        pytest.param(lambda c: c["applications"][0]["args"].update(num_gpu=1),
                     id="unknown-app-argument"),
        pytest.param(lambda c: c["applications"][0]["args"].pop("backend"), id="no-backend"),
        pytest.param(lambda c: c["applications"][0]["args"].update(max_frames=0), id="bad-limit"),
    ],
)  # fmt: skip
def test_a_broken_serve_config_is_rejected(rayservice: dict, breakage) -> None:
    config = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    breakage(config)
    with pytest.raises((ValidationError, ValueError)):
        check_serve_config(config)


# -------------------------------------------------------------------------------------------
# (b) Kubernetes' own schemas


def k8s_objects(resource: dict) -> list[dict[str, Any]]:
    """Every pod template of a KubeRay resource as a Pod; a plain object as itself."""
    if not resource["apiVersion"].startswith("ray.io/"):
        return [resource]
    pods = []
    for group, spec in _groups(_cluster_spec(resource)):
        template = spec["template"]
        meta = {
            **(template.get("metadata") or {}),
            "name": f"{resource['metadata']['name']}-{group}",
        }
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]})
    return pods


def check_k8s(resource: dict) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (test extra)")
    for obj in k8s_objects(resource):
        kv.validate(obj, K8S_VERSION, strict=True)


ALL_FILES = sorted(p.name for p in KUBERAY.glob("*.yaml"))


def test_every_manifest_is_checked() -> None:
    assert ALL_FILES == ["reward-rayservice.yaml", "train-rayjob.yaml", "volumes.yaml"]


@pytest.mark.parametrize("name", ALL_FILES)
def test_kubernetes_objects_validate(name: str) -> None:
    docs = _documents(name)
    assert docs
    for doc in docs:
        check_k8s(doc)


def test_pod_templates_validate(rayjob: dict, rayservice: dict) -> None:
    pods = k8s_objects(rayjob) + k8s_objects(rayservice)
    assert len(pods) == 4 + 2  # head, sim, learner, reward; head, reward
    for resource in (rayjob, rayservice):
        check_k8s(resource)


def _sim(resource: dict) -> dict:
    return next(g for n, g in _groups(_cluster_spec(resource)) if n == "sim")


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param(lambda c: c["resources"].update(limit={"cpu": "1"}), id="unknown-field"),
        pytest.param(lambda c: c.update(image=["evolve-envs"]), id="image-not-a-string"),
        pytest.param(lambda c: c["env"].append({"value": "egl"}), id="env-without-name"),
        pytest.param(lambda c: c.update(ports=[{"containerPort": "x"}]), id="port-not-a-number"),
    ],
)
def test_a_broken_pod_template_is_rejected(rayjob: dict, breakage) -> None:
    import kubernetes_validate as kv

    broken = copy.deepcopy(rayjob)
    breakage(_container(_sim(broken)))
    with pytest.raises(kv.ValidationError):
        check_k8s(broken)


# -------------------------------------------------------------------------------------------
# (c) KubeRay's structure


def test_kuberay_resources_validate(rayjob: dict, rayservice: dict) -> None:
    job = RayJob.model_validate(rayjob)
    service = RayService.model_validate(rayservice)
    assert job.spec.rayClusterSpec is not None
    assert [g.groupName for g in job.spec.rayClusterSpec.workerGroupSpecs] == list(ROLES)
    assert [g.groupName for g in service.spec.rayClusterConfig.workerGroupSpecs] == ["reward"]
    assert job.spec.shutdownAfterJobFinishes  # the cluster goes with the job
    for spec in (job.spec.rayClusterSpec, service.spec.rayClusterConfig):
        assert spec.rayVersion == _ray_version()


def _ray_version() -> str:
    """The Ray version the project pins (setup.cfg's `ray[...]==X` requirements)."""
    pins = set(re.findall(r"ray\[\w+\]==([\d.]+)", (ROOT / "setup.cfg").read_text()))
    assert len(pins) == 1, pins
    return pins.pop()


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param(lambda s: s["workerGroupSpecs"][0].pop("groupName"), id="no-group-name"),
        pytest.param(
            lambda s: s["workerGroupSpecs"][0]["rayStartParams"].update({"num-cpus": 12}),
            id="start-param-not-a-string",
        ),
        pytest.param(
            lambda s: s["workerGroupSpecs"][0].update(maxReplicas=1), id="replicas-over-max"
        ),
        pytest.param(lambda s: s["workerGroupSpecs"][1].update(groupName="sim"), id="group-twice"),
        pytest.param(lambda s: s["headGroupSpec"].update(rayStartParam={}), id="unknown-field"),
        pytest.param(lambda s: s.update(rayVersion="latest"), id="bad-ray-version"),
        pytest.param(lambda s: s.pop("headGroupSpec"), id="no-head"),
    ],
)
def test_a_broken_kuberay_resource_is_rejected(rayjob: dict, breakage) -> None:
    broken = copy.deepcopy(rayjob)
    breakage(broken["spec"]["rayClusterSpec"])
    with pytest.raises(ValidationError):
        RayJob.model_validate(broken)


def test_a_rayjob_without_entrypoint_or_with_a_wrong_kind_is_rejected(
    rayjob: dict, rayservice: dict
) -> None:
    broken = copy.deepcopy(rayjob)
    broken["spec"]["entrypoint"] = ""
    with pytest.raises(ValidationError):
        RayJob.model_validate(broken)
    with pytest.raises(ValidationError):
        RayJob.model_validate({**rayjob, "apiVersion": "ray.io/v1alpha1"})
    with pytest.raises(ValidationError):
        RayService.model_validate({**rayservice, "kind": "RayJob"})


# -------------------------------------------------------------------------------------------
# (d) consistency: resources, GPUs, memory, the training config and the Serve app


def test_the_training_config_validates(rayjob: dict, rayjob_docs: list[dict]) -> None:
    from evolve_envs.training.config import LearnerConfig, WorkersConfig, load_train_config

    data = train_config(rayjob, rayjob_docs)
    assert data["reward_model"]["endpoint"] == "ray://reward"  # the Serve app, by handle
    assert data["workers"]["resources"] == {"sim": 1}
    assert data["workers"]["scheduling"] == "spread"
    assert data["learner"]["placement"] == "cluster"
    assert data["learner"]["resources"] == {"learner": 1}
    known = {"workers": WorkersConfig.model_fields, "learner": LearnerConfig.model_fields}
    checked = copy.deepcopy(data)
    for block, keys in PLACEMENT_KEYS.items():
        for key in keys:  # keys the config model does not know yet are checked above
            if key not in known[block]:
                checked[block].pop(key, None)
    load_train_config(checked)  # raises ConfigError naming a bad key


def test_groups_advertise_their_roles_and_gpus_match(rayjob: dict, rayservice: dict) -> None:
    for resource in (rayjob, rayservice):
        cluster = _cluster_spec(resource)
        assert role_problems(cluster) == []
        assert gpu_problems(cluster) == []
    groups = dict(_groups(_cluster_spec(rayjob)))
    assert node_resources(groups["sim"])["GPU"] == 0  # simulators run on CPU nodes
    assert node_resources(groups["learner"])["GPU"] == 1
    assert node_resources(groups["reward"])["GPU"] >= 1
    assert node_resources(groups["head"])["CPU"] == 0  # nothing scheduled on the head


def test_the_cluster_holds_the_training_run(rayjob: dict, rayjob_docs: list[dict]) -> None:
    assert train_problems(_cluster_spec(rayjob), train_config(rayjob, rayjob_docs)) == []


def test_the_clusters_hold_the_reward_service(
    rayjob: dict, rayjob_docs: list[dict], rayservice: dict
) -> None:
    config = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    assert serve_problems(_cluster_spec(rayservice), config) == []
    assert serve_problems(_cluster_spec(rayjob), serve_deployed_by(rayjob, rayjob_docs)) == []


def _group(cluster: dict, name: str) -> dict:
    return dict(_groups(cluster))[name]


def _params(cluster: dict, name: str) -> dict:
    return _group(cluster, name)["rayStartParams"]


@pytest.mark.parametrize(
    ("breakage", "check"),
    [
        pytest.param(lambda c, t: _params(c, "learner").update({"num-gpus": "2"}), gpu_problems,
                     id="num-gpus-not-the-gpu-limit"),
        pytest.param(lambda c, t: _container(_group(c, "reward"))["resources"]["requests"].update(
            {"nvidia.com/gpu": "2"}), gpu_problems, id="gpu-request-not-the-limit"),
        pytest.param(lambda c, t: _params(c, "sim").update({"num-cpus": "64"}), gpu_problems,
                     id="more-ray-cpus-than-the-pod"),
        pytest.param(lambda c, t: _params(c, "sim").pop("resources"), role_problems,
                     id="sim-group-without-sim"),
        pytest.param(lambda c, t: _params(c, "sim").pop("resources"), train_problems,
                     id="workers-find-no-sim-node"),
        pytest.param(lambda c, t: _group(c, "sim").update(replicas=2, minReplicas=2),
                     train_problems, id="too-few-sim-nodes"),
        pytest.param(lambda c, t: t["workers"].update(num_envs=8), train_problems,
                     id="simulators-outgrow-the-pod-memory"),
        pytest.param(lambda c, t: t["workers"].update(num_cpus=8), train_problems,
                     id="workers-outgrow-the-cpus"),
        pytest.param(lambda c, t: t["workers"].pop("resources"), train_problems,
                     id="workers-without-a-role"),
        pytest.param(lambda c, t: _params(c, "learner").update(
            {"resources": '"{\\"sim\\": 1}"'}), train_problems, id="no-learner-node"),  # fmt: skip
        pytest.param(lambda c, t: t["learner"].update(num_gpus=2), train_problems,
                     id="learner-wants-two-gpus"),
    ],
)  # fmt: skip
def test_a_broken_training_cluster_is_rejected(
    rayjob: dict, rayjob_docs: list[dict], breakage, check
) -> None:
    cluster = copy.deepcopy(_cluster_spec(rayjob))
    train = train_config(rayjob, rayjob_docs)

    def problems() -> list[str]:
        return check(cluster, train) if check is train_problems else check(cluster)

    assert problems() == []
    breakage(cluster, train)
    assert problems(), "the broken copy passed"


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param(lambda c, s: _params(c, "reward").pop("resources"), id="no-reward-node"),
        pytest.param(lambda c, s: _params(c, "reward").update({"num-gpus": "0"}),
                     id="reward-node-without-gpu"),
        pytest.param(lambda c, s: _group(c, "reward").update(maxReplicas=2),
                     id="fewer-nodes-than-max-replicas"),
        pytest.param(lambda c, s: s["applications"][0]["args"].update(num_cpus=16),
                     id="replica-wants-more-cpus-than-a-node"),
        pytest.param(lambda c, s: _container(_group(c, "reward")).pop("volumeMounts"),
                     id="weights-not-mounted"),
    ],
)  # fmt: skip
def test_a_broken_reward_cluster_is_rejected(rayservice: dict, breakage) -> None:
    cluster = copy.deepcopy(_cluster_spec(rayservice))
    config = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    assert serve_problems(cluster, config) == []
    breakage(cluster, config)
    assert serve_problems(cluster, config), "the broken copy passed"


# -------------------------------------------------------------------------------------------
# (e) closed by default: no literal token, a NetworkPolicy, the dashboard behind Ray's token


#: the Secret that holds the reward service's bearer token (key `token`)
SECRET_NAME, SECRET_KEY = "evolve-reward-token", "token"
SERVE_PORT, DASHBOARD_PORT, RAY_CLIENT_PORT = 8111, 8265, 10001
#: the label every pod of one Ray cluster carries (its value names the cluster)
CLUSTER_LABEL = "evolve-envs/ray-cluster"
#: the pods the reward service admits (the trainer pods)
CLIENT_LABELS = {"evolve-envs/reward-client": "true"}
#: the KubeRay operator's pods (its Helm chart's fixed component label)
OPERATOR_LABELS = {"app.kubernetes.io/component": "kuberay-operator"}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: a mapping key or an environment variable name that holds a secret ...
SECRET_NAME_RE = re.compile(r"token|api[_-]?key|apikey|password|passwd|secret|credential", re.I)
#: ... unless it only names where the secret is (a file, a path, a Secret, a variable) or a mode
REFERENCE_NAME_RE = re.compile(r"(file|path|name|ref|mode|env)$", re.I)
LITERAL_IN_TEXT = [
    re.compile(r"--token(?:=|\s+)(?!-)\S"),  # `--token VALUE` on a command line (ps shows it)
    re.compile(r"\bBearer\s+[^\s<$]"),  # an Authorization header written out
]
ENV_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


class _AnyTagLoader(yaml.SafeLoader):
    """Safe loading that reads custom tags (`!!python/name:...` in mkdocs configs) as None."""


_AnyTagLoader.add_multi_constructor("", lambda loader, suffix, node: None)


def shipped_yaml_files() -> list[Path]:
    """Every YAML file the project ships: the manifests, the Serve and training configs, ..."""
    skip = {"tests", "site", "build", "dist", "node_modules", "__pycache__"}
    return sorted(
        p
        for p in ROOT.rglob("*.y*ml")
        if p.suffix in (".yaml", ".yml")
        and not any(part.startswith(".") or part in skip for part in p.relative_to(ROOT).parts)
    )


def literal_token_problems(value: Any, where: str = "") -> list[str]:
    """Secrets written out in a parsed YAML document: a key named like a token, key or password
    with a string value (other than a `${NAME}` reference), an environment variable of such a
    name with a `value`, a `--token VALUE` or `Bearer VALUE` in a string, a Secret with data.
    YAML held in strings (a Serve config, a ConfigMap's files) is read too."""
    problems: list[str] = []
    if isinstance(value, dict):
        if value.get("kind") == "Secret" and (value.get("data") or value.get("stringData")):
            problems.append(f"{where}: a Secret with its data written out")
        name = value.get("name")
        if (
            isinstance(name, str) and "value" in value and SECRET_NAME_RE.search(name)
            and not REFERENCE_NAME_RE.search(name) and value["value"]
        ):  # fmt: skip
            problems.append(f"{where}: environment variable {name} holds a literal value")
        for key, item in value.items():
            here = f"{where}.{key}" if where else str(key)
            if (
                isinstance(key, str) and isinstance(item, str) and item.strip()
                and SECRET_NAME_RE.search(key) and not REFERENCE_NAME_RE.search(key)
                and not ENV_REF.fullmatch(item.strip())
            ):  # fmt: skip
                problems.append(f"{here}: a literal secret")
            problems += literal_token_problems(item, here)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            problems += literal_token_problems(item, f"{where}[{i}]")
    elif isinstance(value, str):
        problems += [
            f"{where}: {rx.pattern} in {value!r}" for rx in LITERAL_IN_TEXT if rx.search(value)
        ]
        if "\n" in value:
            try:
                inner = yaml.load(value, Loader=_AnyTagLoader)  # noqa: S506 - a safe loader
            except yaml.YAMLError:
                inner = None
            if isinstance(inner, (dict, list)):
                problems += literal_token_problems(inner, where + "(yaml)")
    return problems


def _labels(group: dict) -> dict[str, str]:
    return (group["template"].get("metadata") or {}).get("labels") or {}


def _selects(selector: dict | None, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels only; anything else counts as no match) selects."""
    if selector is None:
        return False
    if set(selector) - {"matchLabels"}:
        return False
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _policies(docs: list[dict], labels: dict[str, str]) -> list[dict]:
    """The ingress NetworkPolicies of ``docs`` that select a pod with ``labels``."""
    return [
        d
        for d in docs
        if d.get("kind") == "NetworkPolicy"
        and "Ingress" in (d["spec"].get("policyTypes") or ["Ingress"])
        and _selects(d["spec"].get("podSelector"), labels)
    ]


def _peer_kind(peer: dict, own: dict[str, str], job: str | None) -> str:
    """``own`` (this cluster's pods), ``clients``, ``operator``, ``submitter`` or ``other``."""
    pods = peer.get("podSelector")
    namespaces = peer.get("namespaceSelector")
    if "ipBlock" in peer or pods is None or not (pods.get("matchLabels") or {}):
        return "other"  # addresses, or every pod of some namespaces
    match = pods["matchLabels"]
    if set(pods) - {"matchLabels"}:
        return "other"
    if namespaces is None and all(own.get(k) == v for k, v in match.items()):
        return "own"
    if namespaces is None and match == CLIENT_LABELS:
        return "clients"
    if match == OPERATOR_LABELS:
        return "operator"
    if namespaces is None and job is not None and match == {"job-name": job}:
        return "submitter"
    return "other"


#: the ports each kind of peer may reach (None: any)
PEER_PORTS: dict[str, set[int] | None] = {
    "own": None,
    "clients": {SERVE_PORT},
    "operator": {DASHBOARD_PORT},
    "submitter": {DASHBOARD_PORT},
    "other": set(),
}


def admitted(resource: dict, docs: list[dict]) -> dict[str, list[tuple[str, set[int] | None]]]:
    """For each group of a KubeRay resource, who its NetworkPolicies admit: ``(peer kind,
    ports)`` per peer (``None`` ports: every port). No policy: ``[("other", None)]``."""
    job = resource["metadata"]["name"] if resource["kind"] == "RayJob" else None
    out: dict[str, list[tuple[str, set[int] | None]]] = {}
    for name, group in _groups(_cluster_spec(resource)):
        labels = _labels(group)
        own = {CLUSTER_LABEL: labels[CLUSTER_LABEL]} if CLUSTER_LABEL in labels else {}
        policies = _policies(docs, labels)
        if not policies:
            out[name] = [("other", None)]  # no policy: every pod of the cluster may connect
            continue
        peers: list[tuple[str, set[int] | None]] = []
        for policy in policies:
            for rule in policy["spec"].get("ingress") or []:
                ports = (
                    None if not rule.get("ports")
                    else {int(p["port"]) for p in rule["ports"] if "port" in p}
                )  # fmt: skip
                sources = rule.get("from") or [{}]  # no `from`: every source
                peers += [(_peer_kind(peer, own, job), ports) for peer in sources]
        out[name] = peers
    return out


def access_problems(resource: dict, docs: list[dict]) -> list[str]:
    """The pods' labels and NetworkPolicies: each group carries the cluster label, a policy
    selects it, and every peer reaches only the ports its kind may (own pods: any; trainer pods:
    the reward service; the operator and a RayJob's submitter: the dashboard)."""
    problems = []
    values = {name: _labels(g).get(CLUSTER_LABEL) for name, g in _groups(_cluster_spec(resource))}
    if None in values.values() or len(set(values.values())) != 1:
        problems.append(f"the groups do not share one {CLUSTER_LABEL} label: {values}")
    for name, peers in admitted(resource, docs).items():
        if peers == [("other", None)]:
            problems.append(f"{name}: no NetworkPolicy selects its pods")
            continue
        for kind, ports in peers:
            allowed = PEER_PORTS[kind]
            if allowed is None:
                continue
            if ports is None or not ports <= allowed:
                shown = "every port" if ports is None else sorted(ports)
                problems.append(f"{name}: {kind} peers admitted to {shown}")
    if resource["kind"] == "RayService":
        clients = [
            kind for peers in admitted(resource, docs).values() for kind, ports in peers
            if kind == "clients" and ports is not None and SERVE_PORT in ports
        ]  # fmt: skip
        if not clients:
            problems.append(f"the trainer pods ({CLIENT_LABELS}) may not reach port {SERVE_PORT}")
    return problems


def dashboard_problems(resource: dict, docs: list[dict]) -> list[str]:
    """The Ray head: a dashboard/Jobs API on a non-loopback address needs Ray's token auth and
    may be reached only by the cluster's pods, the operator and a submitter; no Ray client port
    is declared or admitted from outside; no Ingress, NodePort or LoadBalancer for the head."""
    problems = []
    cluster = _cluster_spec(resource)
    head = cluster["headGroupSpec"]
    host = head.get("rayStartParams", {}).get("dashboard-host", "0.0.0.0")  # KubeRay's default
    auth = (cluster.get("authOptions") or {}).get("mode")
    public = host not in LOOPBACK
    if public and auth != "token":
        problems.append(f"dashboard on {host} without Ray token auth (authOptions.mode: token)")
    for name, peers in admitted(resource, docs).items():
        for kind, ports in peers:
            reaches = ports is None or DASHBOARD_PORT in ports or RAY_CLIENT_PORT in ports
            if public and reaches and kind in ("clients", "other"):
                problems.append(f"{name}: {kind} peers reach the dashboard or the Ray client port")
    declared = {p.get("containerPort") for p in _container(head).get("ports", [])}
    if RAY_CLIENT_PORT in declared:
        problems.append(f"the head declares the Ray client port {RAY_CLIENT_PORT}")
    if head.get("enableIngress") or head.get("serviceType") in ("NodePort", "LoadBalancer"):
        problems.append("the head is exposed outside the cluster (Ingress, NodePort, LoadBalancer)")
    return problems


def _from_secret(container: dict, names: tuple[str, ...]) -> set[str]:
    """The Secrets the container reads one of the environment variables ``names`` from."""
    return {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in container.get("env", [])
        if e.get("name") in names and "secretKeyRef" in (e.get("valueFrom") or {})
    }


def _secret_files(group: dict) -> dict[str, str]:
    """Mount path -> Secret name of the Secret volumes the group's Ray container mounts."""
    spec = group["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    return {
        m["mountPath"].rstrip("/") + "/": volumes[m["name"]]["secret"]["secretName"]
        for m in _container(group).get("volumeMounts", [])
        if "secret" in volumes.get(m["name"], {})
    }


def service_token_problems(cluster: dict, serve_config: dict) -> list[str]:
    """A Serve app on a non-loopback proxy: no `insecure_no_token`, no literal token, and every
    group that may hold a replica reads the token from the Secret (a mounted file named by
    `token_file`, or EVOLVE_REWARD_TOKEN(_FILE) from a secretKeyRef)."""
    problems = []
    host = (serve_config.get("http_options") or {}).get("host", "127.0.0.1")
    if host in LOOPBACK:
        return problems
    for app in serve_config["applications"]:
        args = app.get("args", {})
        if args.get("insecure_no_token"):
            problems.append(f"app {app['name']}: insecure_no_token on proxy {host}")
        if args.get("token"):
            problems.append(f"app {app['name']}: a literal token in its args")
        ask = _ask(args.get("num_cpus", 1.0), args.get("num_gpus", 0.0), args.get("resources"))
        for name, group in _groups(cluster):
            if not _fits(node_resources(group), ask):
                continue
            path = str(args.get("token_file") or "")
            secrets = {s for m, s in _secret_files(group).items() if path.startswith(m)}
            secrets |= _from_secret(
                _container(group), ("EVOLVE_REWARD_TOKEN", "EVOLVE_REWARD_TOKEN_FILE")
            )
            if SECRET_NAME not in secrets:
                problems.append(f"{name}: replicas of {app['name']} get no token from the Secret")
    return problems


def client_token_problems(rayjob: dict) -> list[str]:
    """The trainer's pods that call the reward service (the head: the driver; the `sim` group:
    the rollout workers) read EVOLVE_REWARD_TOKEN from the Secret."""
    groups = dict(_groups(_cluster_spec(rayjob)))
    return [
        f"{name}: EVOLVE_REWARD_TOKEN does not come from the Secret {SECRET_NAME}"
        for name in ("head", "sim")
        if SECRET_NAME not in _from_secret(_container(groups[name]), ("EVOLVE_REWARD_TOKEN",))
    ]


def test_the_shipped_yaml_files_are_all_read() -> None:
    names = {str(p.relative_to(ROOT)) for p in shipped_yaml_files()}
    expected = {
        "deploy/kuberay/reward-rayservice.yaml", "deploy/kuberay/train-rayjob.yaml",
        "evolve_envs/configs/serve/cluster.yaml", "evolve_envs/configs/serve/vlm.yaml",
        "mkdocs.yml",
    }  # fmt: skip
    assert expected <= names
    assert not any(n.startswith("tests/") for n in names)


@pytest.mark.parametrize("path", shipped_yaml_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_shipped_yaml_holds_a_literal_token(path: Path) -> None:
    docs = list(yaml.load_all(path.read_text(), Loader=_AnyTagLoader))  # noqa: S506
    assert literal_token_problems(docs, str(path.relative_to(ROOT))) == []


def test_the_clusters_are_closed(rayjob: dict, rayjob_docs: list[dict], rayservice: dict) -> None:
    service_docs = _documents("reward-rayservice.yaml")
    for resource, docs in ((rayjob, rayjob_docs), (rayservice, service_docs)):
        assert access_problems(resource, docs) == []
        assert dashboard_problems(resource, docs) == []
    config = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    assert service_token_problems(_cluster_spec(rayservice), config) == []
    job_config = serve_deployed_by(rayjob, rayjob_docs)
    assert service_token_problems(_cluster_spec(rayjob), job_config) == []
    assert client_token_problems(rayjob) == []
    # the replicas' token file is the Secret's key, where it is mounted
    path = config["applications"][0]["args"]["token_file"]
    reward = dict(_groups(_cluster_spec(rayservice)))["reward"]
    (mount,) = [m for m in _secret_files(reward) if path.startswith(m)]
    volume = next(
        v for v in reward["template"]["spec"]["volumes"] if v.get("secret", {}).get("secretName")
    )
    assert volume["secret"]["items"] == [{"key": SECRET_KEY, "path": path.removeprefix(mount)}]


def _head(resource: dict) -> dict:
    return _cluster_spec(resource)["headGroupSpec"]


def _app_args(resource: dict) -> dict:
    return resource["_serve"]["applications"][0]["args"]


def _policy(docs: list[dict]) -> dict:
    return next(d for d in docs if d.get("kind") == "NetworkPolicy")


#: broken copies of the RayService and its documents: (resource, docs) -> None
CLOSED_BREAKAGES = {
    "literal-token-in-serve-args": lambda r, d: _app_args(r).update(token="s3cret"),
    "literal-token-env": lambda r, d: _container(dict(_groups(_cluster_spec(r)))["reward"])[
        "env"
    ].append({"name": "EVOLVE_REWARD_TOKEN", "value": "s3cret"}),
    "shipped-secret-with-data": lambda r, d: d.append(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET_NAME},
            "stringData": {"token": "s3cret"},
        }
    ),
    "no-network-policy": lambda r, d: d.remove(_policy(d)),
    "policy-admits-everyone": lambda r, d: _policy(d)["spec"]["ingress"].append({}),
    "policy-admits-an-address-block": lambda r, d: _policy(d)["spec"]["ingress"].append(
        {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}
    ),
    "clients-reach-every-port": lambda r, d: _policy(d)["spec"]["ingress"][1].pop("ports"),
    "public-dashboard-without-ray-auth": lambda r, d: _cluster_spec(r).pop("authOptions"),
    "dashboard-open-to-the-namespace": lambda r, d: _policy(d)["spec"]["ingress"].append(
        {"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 8265}]}
    ),
    "ray-client-port-declared": lambda r, d: _container(_head(r))["ports"].append(
        {"containerPort": RAY_CLIENT_PORT, "name": "client"}
    ),
    "head-load-balancer": lambda r, d: _head(r).update(serviceType="LoadBalancer"),
    "insecure-no-token": lambda r, d: _app_args(r).update(insecure_no_token=True),
    "replicas-without-the-secret": lambda r, d: _app_args(r).pop("token_file"),
    "pods-without-the-cluster-label": lambda r, d: _head(r)["template"].pop("metadata"),
}


def closed_problems(resource: dict, docs: list[dict]) -> list[str]:
    """Every closed-by-default check of a RayService and its documents."""
    config = resource.get("_serve") or yaml.safe_load(resource["spec"]["serveConfigV2"])
    clean = {k: v for k, v in resource.items() if k != "_serve"}
    clean["spec"] = {**resource["spec"], "serveConfigV2": yaml.safe_dump(config)}
    return (
        literal_token_problems([clean, *[x for x in docs if x.get("kind") != "RayService"]])
        + access_problems(resource, docs)
        + dashboard_problems(resource, docs)
        + service_token_problems(_cluster_spec(resource), config)
    )


@pytest.mark.parametrize("breakage", list(CLOSED_BREAKAGES.values()), ids=list(CLOSED_BREAKAGES))
def test_an_open_cluster_is_rejected(breakage) -> None:
    docs = copy.deepcopy(_documents("reward-rayservice.yaml"))
    resource = _find(docs, "RayService")
    resource["_serve"] = yaml.safe_load(resource["spec"]["serveConfigV2"])
    assert closed_problems(resource, docs) == []  # the shipped manifest passes
    breakage(resource, docs)
    assert closed_problems(resource, docs), "the broken copy passed"


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param(lambda g: _container(g["head"])["env"].pop(), id="driver-without-token"),
        pytest.param(lambda g: _container(g["sim"])["env"][-1]["valueFrom"]["secretKeyRef"].update(
            name="other"), id="workers-read-another-secret"),
        pytest.param(lambda g: _container(g["sim"])["env"][-1].update(
            value="s3cret", valueFrom=None), id="workers-with-a-literal"),
    ],
)  # fmt: skip
def test_trainer_pods_without_the_secret_are_rejected(rayjob: dict, breakage) -> None:
    broken = copy.deepcopy(rayjob)
    assert client_token_problems(broken) == []
    breakage(dict(_groups(_cluster_spec(broken))))
    assert client_token_problems(broken) or literal_token_problems(broken)


@pytest.mark.parametrize(
    "text",
    [
        "args: {token: change-me}",
        "env: [{name: OPENAI_API_KEY, value: sk-123}]",
        "entrypoint: evolve-reward-server --host 0.0.0.0 --token s3cret",
        "headers: {Authorization: Bearer s3cret}",
        "serveConfigV2: |\n  applications:\n    - args: {token: s3cret}\n",
        "backend_kwargs: {api_key: sk-123}",
    ],
)
def test_a_literal_token_anywhere_is_found(text: str) -> None:
    assert literal_token_problems(yaml.safe_load(text)), text


@pytest.mark.parametrize(
    "text",
    [
        "args: {token_file: /var/run/secrets/evolve-reward/token, insecure_no_token: false}",
        "env: [{name: EVOLVE_REWARD_TOKEN, valueFrom: {secretKeyRef: {name: s, key: token}}}]",
        "env: [{name: EVOLVE_REWARD_TOKEN_FILE, value: /run/secrets/token}]",
        "backend_kwargs: {api_key: '${JUDGE_API_KEY}'}",
        "entrypoint: evolve-reward-server --token-file /run/secrets/token",
        "authOptions: {mode: token}",
    ],
)
def test_references_to_a_secret_are_not_literals(text: str) -> None:
    assert literal_token_problems(yaml.safe_load(text)) == [], text
