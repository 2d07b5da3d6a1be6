"""Every route of the real server with the mock backend, checked against the intensity rule."""

from __future__ import annotations

import base64
import threading

import httpx
import pytest

from evolve_envs.reward.protocol.pickle_codec import safe_pickle_dumps, safe_pickle_loads
from evolve_envs.reward.protocol.wire import (
    Capabilities,
    HealthResponse,
    ScoreResponse,
    TrajectoryCriticResponse,
)
from evolve_envs.reward.service.backends.mock import mock_critic
from tests.helpers.svc_helpers import encode, image_bytes, painted, painted_b64, write_video


def test_health_and_healthcheck(client: httpx.Client) -> None:
    assert HealthResponse.model_validate(client.get("/health").json()).backend == "mock"
    assert HealthResponse.model_validate(client.post("/healthcheck").json()).status == "ok"


def test_capabilities_of_mock(client: httpx.Client) -> None:
    caps = Capabilities.model_validate(client.get("/capabilities").json())
    who = {"model_id", "model_revision", "config_hash"}
    assert caps.model_dump(exclude=who) == Capabilities(
        backend="mock", progress=True, pairwise=True, done=True, video=True, image_score=True
    ).model_dump(exclude=who)
    # who answers: the mock names its rule and seed; the hash covers its kwargs
    assert (caps.model_id, caps.model_revision) == ("mock-intensity", "seed-0")
    assert caps.config_hash is not None and len(caps.config_hash) == 16


def test_trajectory_values_reproduce_painted_progress(client: httpx.Client) -> None:
    progress = [0, 5, 12, 30, 29, 55, 80, 80, 97, 100]
    frames = [painted_b64(p) for p in progress]
    resp = client.post("/trajectory-critic", json={"task": "stack", "frames": frames, "skip": 1})
    traj = TrajectoryCriticResponse.model_validate(resp.json())
    assert traj.critic_list == [
        mock_critic(a, b) for a, b in zip(progress, progress[1:], strict=False)
    ]
    assert traj.value_list == pytest.approx(progress, abs=1e-9)


def test_trajectory_values_are_relative_to_first_frame(client: httpx.Client) -> None:
    progress = [20, 40, 60, 100]
    frames = [painted_b64(p) for p in progress]
    traj = client.post("/trajectory-critic", json={"task": "t", "frames": frames, "skip": 1}).json()
    expected = [100 * (p - 20) / 80 for p in progress]
    assert traj["value_list"] == pytest.approx(expected, abs=1e-9)


def test_trajectory_skip_samples_like_vlac(client: httpx.Client) -> None:
    progress = list(range(0, 60, 5))  # 12 frames; skip 5 compares (0, 5) and (5, 10)
    frames = [painted_b64(p) for p in progress]
    traj = client.post("/trajectory-critic", json={"task": "t", "frames": frames}).json()
    assert traj["critic_list"] == [mock_critic(0, 25), mock_critic(25, 50)]
    assert traj["value_list"] == pytest.approx([0, 25, 50], abs=1e-9)


def test_single_frame_trajectory_has_one_value(client: httpx.Client) -> None:
    traj = client.post("/trajectory-critic", json={"task": "t", "frames": [painted_b64(40)]})
    assert traj.json() == {"value_list": [0.0], "critic_list": []}


def test_trajectory_of_100_frames_returns_100_values(client: httpx.Client) -> None:
    progress = list(range(100))
    frames = [painted_b64(p, size=32) for p in progress]
    before = client.get("/metrics").json()["batches"]["by_kind"].get("critic", {})
    resp = client.post("/trajectory-critic", json={"task": "t", "frames": frames, "skip": 1})
    traj = TrajectoryCriticResponse.model_validate(resp.json())
    assert len(traj.value_list) == 100 and len(traj.critic_list) == 99
    assert traj.value_list == pytest.approx(progress, abs=1e-9)
    after = client.get("/metrics").json()["batches"]["by_kind"]["critic"]
    # 99 pairs run in backend batches of at most 8 frames pairs.
    assert after["items"] - before.get("items", 0) == 99
    assert after["count"] - before.get("count", 0) >= 13
    assert max(int(size) for size in after["histogram"]) <= 8


def test_jpeg_frames_keep_the_painted_integer(client: httpx.Client) -> None:
    progress = [0, 10, 33, 50, 71, 90]
    frames = [encode(painted(p), "JPEG", quality=90) for p in progress]
    traj = client.post("/trajectory-critic", json={"task": "t", "frames": frames, "skip": 1})
    assert traj.json()["value_list"] == pytest.approx(progress, abs=1e-9)


def test_reference_frames_are_accepted(client: httpx.Client) -> None:
    frames = [painted_b64(p) for p in (0, 50)]
    reference = [painted_b64(p) for p in range(0, 100, 10)]
    body = {"task": "t", "frames": frames, "skip": 1, "reference": reference, "ref_num": 4}
    assert client.post("/trajectory-critic", json=body).json()["value_list"] == [0.0, 50.0]


def test_every_reference_frame_is_checked_not_only_the_sampled_ones(client: httpx.Client) -> None:
    reference = [painted_b64(p) for p in range(0, 100, 10)]
    reference[5] = base64.b64encode(b"not an image").decode()  # ref_num=2 keeps frames 0 and 9
    frames = [painted_b64(p) for p in (0, 50)]
    body = {"task": "t", "frames": frames, "skip": 1, "reference": reference, "ref_num": 2}
    resp = client.post("/trajectory-critic", json=body)
    assert resp.status_code == 422 and "reference[5]" in resp.json()["error"]
    assert client.get("/health").status_code == 200


def test_data_url_frames_are_accepted(client: httpx.Client) -> None:
    a, b = (f"data:image/png;base64,{painted_b64(p)}" for p in (10, 55))
    resp = client.post("/pairwise-critic", json={"task": "t", "image_a": a, "image_b": b})
    assert resp.json() == {"critic": 50.0}


@pytest.mark.parametrize(("pa", "pb"), [(0, 0), (0, 100), (40, 70), (70, 40), (90, 0), (100, 100)])
def test_pairwise_critic_exact(client: httpx.Client, pa: int, pb: int) -> None:
    body = {"task": "t", "image_a": painted_b64(pa), "image_b": painted_b64(pb)}
    critic = client.post("/pairwise-critic", json=body).json()["critic"]
    assert critic == mock_critic(pa, pb)
    if pa < 100 and -100 < critic < 100:
        assert pa + (100 - pa) * critic / 100 == pytest.approx(pb)


@pytest.mark.parametrize(("p", "done"), [(0, False), (94, False), (95, True), (100, True)])
def test_done_threshold_and_probability(client: httpx.Client, p: int, done: bool) -> None:
    body = {
        "task": "t",
        "first_frame": painted_b64(0),
        "prev_frame": painted_b64(max(0, p - 10)),
        "curr_frame": painted_b64(p),
    }
    assert client.post("/done", json=body).json() == {"done": done, "prob": p / 100}


def test_score_inline_video_uses_last_sampled_frame(client: httpx.Client, tmp_path) -> None:  # noqa: ANN001
    path = str(tmp_path / "episode.mp4")
    write_video(path, [0, 10, 20, 30, 40, 50, 60, 80])
    video_b64 = base64.b64encode(open(path, "rb").read()).decode()
    resp = client.post("/score", json={"task_text": "t", "video_b64": video_b64, "nframes": 4})
    score = ScoreResponse.model_validate(resp.json()).score
    assert score == pytest.approx(0.80, abs=0.011)  # H.264 limited range: +-1 grey level


def test_score_video_path(client: httpx.Client, tmp_path) -> None:  # noqa: ANN001
    path = str(tmp_path / "episode.mp4")
    write_video(path, [0, 20, 40, 60])
    resp = client.post("/score", json={"task_text": "t", "video_path": path, "nframes": 16})
    assert resp.status_code == 200, resp.text
    assert resp.json()["score"] == pytest.approx(0.60, abs=0.011)


@pytest.mark.parametrize("path", ["/pickle", "/"])
def test_pickle_scorer(client: httpx.Client, path: str) -> None:
    progress = [0, 25, 50, 100]
    body = safe_pickle_dumps(
        {
            "images": [image_bytes(p, fmt="JPEG") for p in progress],
            "prompts": [f"prompt {p}" for p in progress],
            "metadata": {"step": 3},
        }
    )
    resp = client.post(path, content=body)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/octet-stream"
    assert safe_pickle_loads(resp.content) == {"scores": [p / 100 for p in progress]}


def test_pickle_scorer_answers_json_when_asked(client: httpx.Client) -> None:
    body = safe_pickle_dumps({"images": [image_bytes(30)], "prompts": ["p"]})
    resp = client.post("/pickle", content=body, headers={"Accept": "application/json"})
    assert resp.json() == {"scores": [0.3]}


def test_metrics_report_requests_errors_and_latency(client: httpx.Client) -> None:
    before = client.get("/metrics").json()
    client.post("/healthcheck")
    client.post("/trajectory-critic", json={"task": "t", "frames": []})
    after = client.get("/metrics").json()
    assert after["requests"]["/healthcheck"] == before["requests"].get("/healthcheck", 0) + 1
    assert (
        after["errors"]["/trajectory-critic"] == before["errors"].get("/trajectory-critic", 0) + 1
    )
    lat = after["latency_ms"]["/healthcheck"]
    assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert after["backend"] == "mock" and after["max_batch"] == 8


def test_concurrent_requests_are_coalesced(client: httpx.Client, mock_service) -> None:  # noqa: ANN001
    n = 16
    before = client.get("/metrics").json()["batches"]["by_kind"].get("critic", {})
    barrier = threading.Barrier(n)
    results: dict[int, float] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            with httpx.Client(base_url=mock_service.url, timeout=30, trust_env=False) as c:
                c.get("/health")  # connect before the barrier
                body = {"task": "t", "image_a": painted_b64(0), "image_b": painted_b64(i)}
                barrier.wait()
                results[i] = c.post("/pairwise-critic", json=body).json()["critic"]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {i: float(i) for i in range(n)}
    after = client.get("/metrics").json()["batches"]["by_kind"]["critic"]
    batches = after["count"] - before.get("count", 0)
    assert after["items"] - before.get("items", 0) == n
    assert batches < n  # at least one backend batch served several clients


def test_metrics_in_prometheus_text_for_a_scraper(client: httpx.Client) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    client.get("/capabilities")
    client.post("/pairwise-critic", json={"task": "t", "image_a": painted_b64(0),
                                          "image_b": painted_b64(30)})  # fmt: skip
    scrape = client.get("/metrics", headers={"Accept": "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"})
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(scrape.text)}
    as_json = client.get("/metrics").json()  # httpx's default Accept: */* -> JSON
    requests = {s.labels["route"]: s.value for s in families["reward_requests"].samples
                if s.name == "reward_requests_total"}  # fmt: skip
    assert requests["/pairwise-critic"] >= 1
    assert requests["/pairwise-critic"] <= as_json["requests"]["/pairwise-critic"]
    counts = families["reward_backend_batch_size"].samples
    batch = [s for s in counts if s.name.endswith("_count") and s.labels["kind"] == "critic"]
    assert batch and batch[0].value >= 1
    assert {"reward_request_latency_seconds", "reward_requests_in_flight"} <= set(families)


def test_two_metrics_objects_in_one_process_do_not_clash() -> None:
    from evolve_envs.reward.service.state.metrics import Metrics, wants_prometheus

    a, b = Metrics(), Metrics()
    a.record_request("/done", 200, 0.01)
    b.record_request("/done", 500, 0.02)
    assert b'reward_requests_total{route="/done"} 1.0' in a.prometheus_text()
    assert b'reward_request_errors_total{route="/done"} 1.0' in b.prometheus_text()
    assert b"reward_request_errors_total" not in a.prometheus_text().split(b"\n# HELP")[0]
    assert wants_prometheus("application/openmetrics-text; version=1.0.0")
    assert not wants_prometheus("*/*") and not wants_prometheus(None)
