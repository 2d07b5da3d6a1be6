"""ProgressClient against a real server (mock backend, intensity rule): exact answers."""

from __future__ import annotations

import numpy as np
import pytest

from evolve_envs.reward.clients.progress_client import DoneResult, ProgressClient
from tests.reward.clients.client_helpers import paint, server_metrics


@pytest.fixture
def client(server_a, make_pool):
    with ProgressClient(make_pool(server_a.url)) as progress:
        yield progress


def test_capabilities_of_the_mock_backend(client, server_a):
    result = client.capabilities()
    assert result.ok and not result.fallback and result.endpoint == server_a.url
    caps = result.value
    assert caps.backend == "mock"
    assert caps.progress and caps.pairwise and caps.done


@pytest.mark.parametrize(
    ("pa", "pb", "critic"), [(0, 40, 40.0), (20, 60, 50.0), (60, 40, -50.0), (60, 20, -100.0)]
)
def test_pairwise_critic_is_exact(client, pa, pb, critic):
    result = client.pairwise_critic("open the drawer", paint(pa), paint(pb))
    assert result.ok and result.error is None and result.attempts == 1
    assert result.value == pytest.approx(critic)
    # accumulating the critic gives back the painted progress of the second frame
    assert pa + (100 - pa) * result.value / 100 == pytest.approx(pb)


def test_pairwise_accepts_grey_and_odd_sized_frames(client):
    result = client.pairwise_critic("t", paint(0, (31, 17)), paint(70, (31, 17)))
    assert result.ok and result.value == pytest.approx(70.0)


@pytest.mark.parametrize("skip", [1, 2, 3])
def test_trajectory_values_follow_the_painted_progress(client, skip):
    progress = [0, 5, 12, 20, 33, 41, 58, 64, 80, 97]
    frames = [paint(p) for p in progress]
    result = client.trajectory_values("stack the bowls", frames, skip=skip)
    assert result.ok
    tv = result.value
    expected = progress[::skip]
    assert tv.indices == list(range(0, len(progress), skip))
    assert len(tv.value_list) == len(expected) and len(tv.critic_list) == len(expected) - 1
    assert tv.value_list == pytest.approx(expected)


def test_trajectory_default_skip_is_vlac_five(client):
    frames = [paint(p) for p in range(0, 60, 5)]  # 12 frames -> indices 0, 5, 10
    tv = client.trajectory_values("t", frames).value
    assert tv.indices == [0, 5, 10]
    assert tv.value_list == pytest.approx([0, 25, 50])


def test_hundred_frame_trajectory_returns_hundred_values(client, server_a):
    before = server_metrics(server_a)["batches"]["by_kind"].get("critic", {}).get("items", 0)
    progress = [p % 100 for p in range(100)]
    progress = sorted(progress)
    frames = [paint(p, (16, 16, 3)) for p in progress]
    result = client.trajectory_values("t", frames, skip=1, batch_size=8)
    assert result.ok and len(result.value.value_list) == 100
    assert result.value.value_list == pytest.approx(progress)
    after = server_metrics(server_a)["batches"]["by_kind"]["critic"]["items"]
    assert after - before == 99  # one critic per consecutive pair, all computed by the backend


def test_trajectory_with_reference_frames(client):
    frames = [paint(p) for p in (0, 50, 100)]
    result = client.trajectory_values("t", frames, skip=1, reference=[paint(0), paint(100)])
    assert result.ok and result.value.value_list == pytest.approx([0, 50, 100])


@pytest.mark.parametrize(("curr", "done"), [(96, True), (95, True), (50, False), (0, False)])
def test_done_uses_the_current_frame(client, curr, done):
    result = client.done("t", paint(0), paint(40), paint(curr))
    assert result.ok
    assert result.value == DoneResult(done=done, prob=pytest.approx(curr / 100))


def test_submit_variants_return_futures_with_the_same_answers(client):
    pairwise = client.submit_pairwise_critic("t", paint(10), paint(55))
    trajectory = client.submit_trajectory_values("t", [paint(0), paint(30), paint(90)], skip=1)
    done = client.submit_done("t", paint(0), paint(90), paint(99))
    assert pairwise.result(timeout=60).value == pytest.approx(50.0)
    assert trajectory.result(timeout=60).value.value_list == pytest.approx([0, 30, 90])
    assert done.result(timeout=60).value.done is True
    assert client.stats.snapshot()["calls"] == 3


def test_submit_copies_frames_so_callers_may_reuse_their_buffers(client):
    buffer_a, buffer_b = paint(0), paint(80)
    futures = []
    for _ in range(8):
        futures.append(client.submit_pairwise_critic("t", buffer_a, buffer_b))
        buffer_b[...] = 0  # an env overwriting its render buffer right after submitting
        buffer_b[...] = paint(80)
    buffer_b[...] = 0
    assert [f.result(timeout=60).value for f in futures] == pytest.approx([80.0] * 8)


def test_stats_count_calls_and_latency(client):
    for p in (10, 20, 30):
        client.pairwise_critic("t", paint(0), paint(p))
    snap = client.stats.snapshot()
    assert snap["calls"] == 3 and snap["ok"] == 3 and snap["errors"] == 0
    assert snap["latency_samples"] == 3 and snap["latency_p50_s"] > 0


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda c: c.pairwise_critic("t", paint(0).astype(np.float32), paint(1)), "uint8"),
        (lambda c: c.pairwise_critic("", paint(0), paint(1)), "task"),
        (lambda c: c.trajectory_values("t", []), "at least one frame"),
        (lambda c: c.trajectory_values("t", [paint(0)], skip=0), "skip"),
        (lambda c: c.submit_done("t", paint(0), paint(0), np.zeros((4, 4, 4), np.uint8)), "HxW"),
    ],
)
def test_bad_inputs_raise_in_the_caller_without_a_request(client, call, words):
    with pytest.raises((ValueError, TypeError), match=words):
        call(client)
    assert client.stats.snapshot()["calls"] == 0


def test_client_built_from_a_url_owns_and_closes_its_pool(server_a):
    client = ProgressClient(server_a.url, timeout=10)
    assert client.pairwise_critic("t", paint(0), paint(25)).value == pytest.approx(25.0)
    client.close()
    assert client.pool.closed
    with pytest.raises(RuntimeError, match="closed"):
        client.submit_pairwise_critic("t", paint(0), paint(25))
