"""Compatibility with the reward scorers and clients people already run.

The other side of each exchange is written here from the published request/response shapes
(deepgen_rl / VeRL-Omni pickle scorers at `POST /`, HPSv2-style numpy scores, flow_grpo's remote
scorer variant, servers without a health route), never copied from those projects.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient
from evolve_envs.reward.clients.video_score_client import VideoScoreClient
from evolve_envs.reward.protocol.pickle_codec import safe_pickle_loads
from evolve_envs.reward.protocol.pickle_types import UnsafePickleError
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from evolve_envs.stack.config import RewardModelConfig
from tests.helpers.svc_helpers import image_bytes, painted_b64
from tests.reward.service.compat_servers import pickle_scorer_server, rlaif_video_server


@pytest.fixture()
def http(default_service: EmbeddedService) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=default_service.url, timeout=30.0, trust_env=False) as c:
        yield c


# ------------------------------------------------------------ their clients, our server


def test_deepgen_style_client_posts_a_plain_pickle_to_root(http: httpx.Client) -> None:
    # deepgen_rl / VeRL-Omni: requests.post(url + "/", data=pickle.dumps(...)), no content type.
    body = pickle.dumps(
        {"images": [image_bytes(30), image_bytes(70)], "prompts": ["a", "b"], "metadata": {}}
    )
    resp = http.post("/", content=body)
    assert resp.status_code == 200, resp.content[:200]
    assert pickle.loads(resp.content) == {"scores": [0.3, 0.7]}  # noqa: S301 - what they do


def test_flow_grpo_variants_with_numpy_prompts_are_answered_in_their_keys(
    http: httpx.Client,
) -> None:
    images = [image_bytes(20, fmt="JPEG"), image_bytes(60, fmt="JPEG")]
    prompts = np.array(["a red cube", "a blue ball"])  # flow_grpo sends a numpy str array
    with_meta = {"images": images, "meta_datas": [{"tag": "x"}, {"tag": "y"}], "only_strict": True}
    for request in ({"images": images}, {"images": images, "prompts": prompts}, with_meta):
        resp = http.post("/", content=pickle.dumps(request))
        assert resp.status_code == 200, (sorted(request), resp.content[:300])
        answer = pickle.loads(resp.content)  # noqa: S301
        assert answer["scores"] == pytest.approx([0.2, 0.6], abs=0.011)
        if "meta_datas" in request:
            assert answer["rewards"] == answer["strict_rewards"] == answer["scores"]
            assert answer["group_rewards"] == {} and answer["group_strict_rewards"] == {}


def flow_grpo_style_scorer(url: str, *, with_prompts: bool, batch_size: int = 2):  # noqa: ANN201
    """A client written to flow_grpo's published remote-scorer behaviour: NHWC uint8 images in
    batches (``np.array_split``), each JPEG-encoded with PIL, posted as ``pickle.dumps`` of
    ``{"images"}`` (its DeQA scorer) or ``{"images", "prompts"}`` with the prompts a NumPy
    array (its UnifiedReward scorer) to the server's root URL with no content type, the scores
    read from ``pickle.loads(response)["outputs"]``."""
    import io

    from PIL import Image

    def score(images: np.ndarray, prompts: list[str]) -> list[float]:
        n_batches = int(np.ceil(len(images) / batch_size))
        out: list[float] = []
        for image_batch, prompt_batch in zip(
            np.array_split(images, n_batches), np.array_split(np.array(prompts), n_batches),
            strict=True,
        ):  # fmt: skip
            jpegs = []
            for image in image_batch:
                buf = io.BytesIO()
                Image.fromarray(image).save(buf, format="JPEG")
                jpegs.append(buf.getvalue())
            data: dict = {"images": jpegs}
            if with_prompts:
                data["prompts"] = prompt_batch  # a NumPy str array, as they send it
            resp = httpx.post(url, content=pickle.dumps(data), timeout=120, trust_env=False)
            resp.raise_for_status()
            out += pickle.loads(resp.content)["outputs"]  # noqa: S301 - what they do
        return out

    return score


@pytest.mark.parametrize("with_prompts", [False, True], ids=["images_only", "numpy_prompts"])
def test_flow_grpo_style_client_reads_outputs(
    default_service: EmbeddedService, with_prompts: bool
) -> None:
    from tests.helpers.svc_helpers import painted

    levels = [10, 40, 70, 90, 50]
    images = np.stack([painted(p) for p in levels])
    prompts = [f"prompt {i}" for i in range(len(levels))]
    scorer = flow_grpo_style_scorer(default_service.url, with_prompts=with_prompts)
    scores = scorer(images, prompts)
    assert scores == pytest.approx([p / 100 for p in levels], abs=0.011)


def test_numpy_object_arrays_and_other_globals_are_refused(http: httpx.Client) -> None:
    for body in (
        pickle.dumps({"images": [image_bytes(10)], "prompts": np.array(["p"], dtype=object)}),
        pickle.dumps({"images": [image_bytes(10)], "prompts": ["p"], "metadata": {"f": os.system}}),
        pickle.dumps({"images": [image_bytes(10)], "prompts": np.ma.array([1, 2])}),
    ):
        resp = http.post("/", content=body, headers={"Accept": "application/json"})
        assert resp.status_code == 400, resp.text
        assert "global" in resp.json()["error"] or "dtype" in resp.json()["error"]
    assert http.post("/", content=pickle.dumps({"images": [image_bytes(10)]})).status_code == 200


def test_pickle_route_refuses_browser_content_types(http: httpx.Client) -> None:
    body = pickle.dumps({"images": [image_bytes(10)], "prompts": ["p"]})
    for content_type in ("text/plain", "text/plain;charset=UTF-8", "multipart/form-data"):
        resp = http.post("/", content=body, headers={"Content-Type": content_type})
        assert resp.status_code == 415, (content_type, resp.status_code)
    ok = http.post("/pickle", content=body, headers={"Content-Type": "application/octet-stream"})
    assert ok.status_code == 200


def test_host_and_origin_allow_list(default_service: EmbeddedService, http: httpx.Client) -> None:
    # A rebound DNS name reaches 127.0.0.1 but still names itself in Host.
    resp = http.get("/health", headers={"Host": "attacker.example:8111"})
    assert resp.status_code == 421 and "attacker.example" in resp.json()["error"]
    resp = http.post(
        "/", content=b"x", headers={"Origin": "http://attacker.example", "Accept": "*/*"}
    )
    assert resp.status_code == 403 and resp.headers["content-type"] == "application/json"
    for host in ("localhost", f"127.0.0.1:{default_service.port}", "[::1]:8111"):
        assert http.get("/health", headers={"Host": host}).status_code == 200, host
    assert http.get("/health", headers={"Origin": default_service.url}).status_code == 200


# ------------------------------------------------------------ our client, their servers


def test_pickle_client_reads_numpy_scores_from_root_by_default() -> None:
    # HPSv2-style: scores come back as numpy.float32 values.
    def answer(request: dict) -> dict:
        return {"scores": [np.float32(0.25 * (i + 1)) for i in range(len(request["images"]))]}

    with pickle_scorer_server(answer) as (url, seen):
        with PickleScorerClient(url, fail_on_request_error=True) as client:
            result = client.score([np.zeros((8, 8, 3), np.uint8)] * 2, ["a", "b"])
    assert result.value == [0.25, 0.5] and all(type(v) is float for v in result.value)
    assert seen[0]["prompts"] == ["a", "b"]


@pytest.mark.parametrize("key", ["outputs", "rewards"])
def test_pickle_client_reads_flow_grpo_answers(key: str) -> None:
    def answer(request: dict) -> dict:
        return {key: np.linspace(0.1, 0.2, len(request["images"]), dtype=np.float32)}

    with pickle_scorer_server(answer) as (url, _):
        with PickleScorerClient(url, fail_on_request_error=True) as client:
            result = client.score([np.zeros((8, 8, 3), np.uint8)] * 2, ["a", "b"])
    assert result.value == pytest.approx([0.1, 0.2])


def test_client_unpickler_refuses_object_arrays_and_globals() -> None:
    for payload in (
        pickle.dumps({"scores": np.array([0.5], dtype=object)}),
        pickle.dumps({"scores": [0.5], "x": os.system}),
    ):
        with pytest.raises(UnsafePickleError):
            safe_pickle_loads(payload)


def test_endpoint_without_health_route_comes_back() -> None:
    """A scorer with only `POST /` is marked down after failures, then probed back up."""
    with pickle_scorer_server(lambda r: {"scores": [0.5]}, fail_first=1) as (url, _):
        pool = EndpointPool(url, max_retries=0, failures_to_down=1, probe_interval_s=60)
        with PickleScorerClient(pool) as client:
            first = client.score([np.zeros((8, 8, 3), np.uint8)], ["a"])
            assert first.fallback and pool.healthy_urls() == []
            assert pool.probe() == {url: True}  # 404 on GET /health and POST /healthcheck
            assert client.score([np.zeros((8, 8, 3), np.uint8)], ["a"]).value == [0.5]
        pool.close()


# ------------------------------------------------------------ RLinf-RLAIF's video scorer


def test_video_client_auto_transport_switches_to_path_when_the_server_demands_it(
    tmp_path: Path,
) -> None:
    frames = [np.full((32, 32, 3), v, np.uint8) for v in (0, 100, 200)]
    with rlaif_video_server(score=0.75) as (url, seen):
        inline = VideoScoreClient(url, fallback_score=-1.0)  # the default transport
        assert inline.score("t", frames).value == -1.0  # 422: the server wants a path
        inline.close()
        auto = VideoScoreClient(url, mode="auto", shared_dir=tmp_path, fail_on_request_error=True)
        assert auto.score("t", frames).value == 0.75 and auto.transport == "path"
        assert auto.score("t", frames).value == 0.75
        auto.close()
    kinds = ["video_path" if "video_path" in r else "video_b64" for r in seen]
    assert kinds == ["video_b64", "video_b64", "video_path", "video_path"]
    assert all(r["nframes"] == 16 for r in seen)
    assert list(tmp_path.iterdir()) == []  # shared files are removed after each request


def test_video_client_auto_without_shared_dir_stays_inline_and_nframes_is_capped() -> None:
    with rlaif_video_server() as (url, seen):
        with VideoScoreClient(url, mode="auto", fallback_score=-1.0) as client:
            assert client.score("t", [np.zeros((16, 16, 3), np.uint8)]).value == -1.0
    assert len(seen) == 1 and "video_b64" in seen[0]
    with pytest.raises(ValueError, match="max_nframes"):
        VideoScoreClient("http://127.0.0.1:1", nframes=129)
    with pytest.raises(ValueError):
        RewardModelConfig(kind="video_score", nframes=129)
    cfg = RewardModelConfig(kind="video_score", video_transport="auto", health_route="/healthcheck")
    assert cfg.video_transport == "auto" and cfg.pickle_route == "/"


def test_vlac_shaped_client_uses_every_progress_route(http: httpx.Client) -> None:
    """VLAC's client: POST /healthcheck, then JSON bodies of base64 JPEG frames."""
    jpeg = [painted_b64(p, fmt="JPEG") for p in (0, 25, 50, 75, 100)]
    assert http.post("/healthcheck").json()["status"] == "ok"
    traj = http.post(
        "/trajectory-critic",
        json={"task": "t", "frames": jpeg, "skip": 1, "ref_num": 2, "batch_size": 8,
              "reference": jpeg[:3], "task_name": "t", "use_server_reference": False},
    ).json()  # fmt: skip
    assert len(traj["critic_list"]) == 4 and traj["value_list"][-1] == pytest.approx(100, abs=1.5)
    pair = http.post("/pairwise-critic", json={"task": "t", "image_a": jpeg[0], "image_b": jpeg[2]})
    assert pair.json()["critic"] == pytest.approx(50, abs=1.5)
    done = http.post(
        "/done",
        json={"task": "t", "first_frame": jpeg[0], "prev_frame": jpeg[3], "curr_frame": jpeg[4]},
    ).json()
    assert done["done"] is True and done["prob"] == pytest.approx(1.0, abs=0.015)
