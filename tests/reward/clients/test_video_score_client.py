"""VideoScoreClient against a real server: sampling, inline and path transport, temp files."""

from __future__ import annotations

import imageio.v2 as imageio
import numpy as np
import pytest

from evolve_envs.reward.clients.errors import RewardServiceError
from evolve_envs.reward.clients.video_score_client import (
    VideoScoreClient,
    sample_indices,
    write_mp4,
)
from tests.reward.clients.client_helpers import arm_fault, free_port, paint, within_guard


def episode(progress: list[int], shape=(32, 32, 3)) -> list[np.ndarray]:
    return [paint(p, shape) for p in progress]


@pytest.mark.parametrize(
    ("count", "nframes", "expected"),
    [
        (10, 4, [0, 3, 6, 9]),
        (3, 16, [0, 1, 2]),
        (16, 16, list(range(16))),
        (100, 5, [0, 25, 50, 74, 99]),
        (1, 16, [0]),
        (100, 1, [99]),  # one frame: the last, as the server samples
    ],
)
def test_uniform_sampling(count, nframes, expected):
    assert sample_indices(count, nframes) == expected


def test_mp4_holds_the_sampled_frames_at_the_requested_fps(tmp_path):
    path = tmp_path / "v.mp4"
    write_mp4(path, episode([0, 50, 100], shape=(33, 31, 3)), fps=4)
    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        frames = [np.asarray(f) for f in reader]
        assert reader.get_meta_data()["fps"] == pytest.approx(4)
    finally:
        reader.close()
    assert len(frames) == 3 and frames[0].shape == (34, 32, 3)  # odd sizes padded to even
    assert [round(100 * f.mean() / 255) for f in frames] == pytest.approx([0, 50, 100], abs=1)


@pytest.mark.parametrize("mode", ["inline", "path"])
def test_score_is_the_progress_of_the_last_sampled_frame(mode, server_a, make_pool, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    client = VideoScoreClient(
        make_pool(server_a.url),
        nframes=4,
        mode=mode,
        shared_dir=shared if mode == "path" else None,
        temp_dir=tmp_path / "tmp" if mode == "inline" else None,
    )
    (tmp_path / "tmp").mkdir()
    result = client.score("put the bowl on the plate", episode([0, 10, 20, 30, 40, 50, 60, 70]))
    assert result.ok and not result.fallback and result.endpoint == server_a.url
    # indices 0, 2, 5, 7 -> last sampled frame painted 70 (H.264 keeps it within 1 %)
    assert result.value == pytest.approx(0.70, abs=0.011)
    assert list(shared.iterdir()) == [] and list((tmp_path / "tmp").iterdir()) == []
    client.close()


def test_fewer_frames_than_nframes_are_all_sent(server_a, make_pool):
    client = VideoScoreClient(make_pool(server_a.url), nframes=16)
    result = client.score("t", np.stack(episode([5, 25, 45])))
    assert result.ok and result.value == pytest.approx(0.45, abs=0.011)
    future = client.submit_score("t", episode([90, 10]))
    assert future.result(timeout=60).value == pytest.approx(0.10, abs=0.011)
    client.close()


@pytest.mark.parametrize("mode", ["inline", "path"])
@pytest.mark.parametrize("fault", ["status", "invalid_json", "nan", "wrong_length", "no_server"])
def test_failures_fall_back_and_clean_temp_files(mode, fault, server_a, make_pool, tmp_path):
    url = server_a.url
    if fault == "no_server":
        url = f"http://127.0.0.1:{free_port()}"
    else:
        arm_fault(server_a, mode=fault, status=500)
    kwargs = {"shared_dir": tmp_path} if mode == "path" else {"temp_dir": tmp_path}
    soft = VideoScoreClient(make_pool(url), mode=mode, fallback_score=-1.0, **kwargs)
    result = within_guard(lambda: soft.score("t", episode([0, 50])))
    assert result.fallback and result.value == -1.0 and "/score" in result.error
    assert url in result.error
    assert list(tmp_path.iterdir()) == []

    strict = VideoScoreClient(make_pool(url), mode=mode, fail_on_request_error=True, **kwargs)
    with pytest.raises(RewardServiceError) as info:
        within_guard(lambda: strict.score("t", episode([0, 50])))
    assert info.value.route == "/score" and info.value.endpoint == url
    assert list(tmp_path.iterdir()) == []


def test_unwritable_shared_dir_is_a_named_failure_not_a_crash(server_a, make_pool, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    client = VideoScoreClient(make_pool(server_a.url), mode="path", shared_dir=shared)
    shared.rmdir()  # the shared filesystem went away after start-up
    result = client.score("t", episode([0, 50]))
    assert result.fallback and result.value is None and "could not write" in result.error


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"mode": "path"}, "shared_dir"),
        ({"mode": "path", "shared_dir": "/nonexistent/dir"}, "not a directory"),
        ({"mode": "ftp"}, "mode"),
        ({"nframes": 0}, "nframes"),
    ],
)
def test_bad_settings_are_refused(kwargs, words, server_a):
    with pytest.raises(ValueError, match=words):
        VideoScoreClient(server_a.url, **kwargs)


def test_bad_frames_are_refused_before_any_request(server_a, make_pool):
    client = VideoScoreClient(make_pool(server_a.url))
    with pytest.raises(ValueError, match="at least one frame"):
        client.score("t", [])
    with pytest.raises(ValueError, match="shape"):
        client.score("t", [paint(0), paint(0, (16, 16, 3))])
    assert client.stats.snapshot()["calls"] == 0
