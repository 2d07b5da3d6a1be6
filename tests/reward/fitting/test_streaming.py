"""``fit-reward`` streams its frames: an episode is decoded and written to the frame store before
the next is read, training reads one batch of frames at a time, and the weights come out the same
as a fit over every frame held in memory. Counted with an instrumented reader and store, on a
small recording written here."""

from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from evolve_envs.recording.episodes import EpisodeWriter, RecordedEpisode
from evolve_envs.reward.fitting import trainer
from evolve_envs.reward.fitting.data import (
    FrameStore,
    UnusableDataError,
    load_episodes,
    progress_labels,
    split_episodes,
)
from evolve_envs.reward.fitting.loss import frame_targets, progress_loss
from evolve_envs.reward.fitting.model import build_model, load_model, trainable
from evolve_envs.reward.fitting.trainer import FitOptions, fit_reward

LENGTHS = [12, 9, 15, 10, 14, 11]  # steps; an episode has one frame more
TINY = {"input_size": 16, "channels": 4, "batch_size": 8, "progress": False, "held_out": 0.3}


def _write(root: Path, outcomes: list[bool]) -> Path:
    writer = EpisodeWriter(root)
    rng = np.random.default_rng(0)
    for k, (steps, success) in enumerate(zip(LENGTHS, outcomes, strict=False)):
        frames = [rng.integers(0, 255, (24, 24, 3), dtype=np.uint8) for _ in range(steps + 1)]
        rows = [{}] + [{"action": [0.0, 0.0]}] * steps
        rows[-1] = {"action": [0.0, 0.0], "terminated": success, "is_success": success}
        writer.write(frames, rows, {"task": f"task {k % 2}", "success": success})
    return root


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("rec"), [True, True, False, True, True, False])


@pytest.mark.parametrize("size", [16, 24])  # resized, and kept as decoded (24: the recorded size)
def test_a_fit_holds_one_decoded_episode_and_reads_one_batch_at_a_time(
    recording: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    decode, read = RecordedEpisode.frames, FrameStore.read
    live = [0]
    held_at_decode: list[tuple[int, int]] = []  # (frames held just after a decode, its frames)
    batches: list[int] = []
    loaded: list[list] = []

    def release(n: int) -> None:
        live[0] -= n

    def counting_decode(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        frames = decode(self, *args, **kwargs)
        live[0] += len(frames)
        weakref.finalize(frames, release, len(frames))
        held_at_decode.append((live[0], len(frames)))
        return frames

    def counting_read(self, rows):  # noqa: ANN001, ANN202
        batches.append(len(rows))
        return read(self, rows)

    def spy_load(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        episodes = load_episodes(*args, **kwargs)
        loaded.append(episodes)
        return episodes

    monkeypatch.setattr(RecordedEpisode, "frames", counting_decode)
    monkeypatch.setattr(FrameStore, "read", counting_read)
    monkeypatch.setattr(trainer, "load_episodes", spy_load)
    out = tmp_path / "model"
    report = fit_reward(
        FitOptions(str(recording), str(out), epochs=2, **{**TINY, "input_size": size})
    )

    # decoding: every episode once, and none still held when the next is decoded
    assert [n for _, n in held_at_decode] == [s + 1 for s in LENGTHS]
    assert all(held == n for held, n in held_at_decode)
    # the episodes handed on read from the store's file, not from memory
    ((episodes),) = loaded
    assert all(isinstance(e.frames, np.memmap) for e in episodes)
    # training: a batch of frames per read, every training frame once an epoch
    train_frames = sum(s + 1 for s, e in zip(LENGTHS, episodes, strict=True)
                       if e.episode_id in report["train_ids"])  # fmt: skip
    assert max(batches) <= TINY["batch_size"]
    assert sum(batches) == 2 * train_frames < 2 * sum(s + 1 for s in LENGTHS)
    assert not (out / ".fit").exists()


def test_the_streamed_fit_matches_one_over_frames_held_in_memory(
    recording: Path, tmp_path: Path
) -> None:
    out = tmp_path / "streamed"
    fit_reward(FitOptions(str(recording), str(out), epochs=2, seed=4, **TINY))

    # the same fit with every training frame in one array (as fit-reward did before streaming)
    episodes = load_episodes(recording, input_size=16)
    train, _ = split_episodes(episodes, TINY["held_out"], seed=4)
    frames = np.concatenate([e.frames for e in train])
    labels = np.concatenate([progress_labels(e.steps, e.success) for e in train])
    tasks = [e.task for e in train for _ in range(len(e.frames))]
    torch.manual_seed(4)
    net = build_model(input_size=16, channels=4, name="streamed")
    opt = torch.optim.Adam(trainable(net), lr=FitOptions("", "").lr)
    pixels = torch.as_tensor(frames).permute(0, 3, 1, 2).contiguous()
    target, is_success, weight = frame_targets(labels, net.device)
    for epoch in range(2):
        net.module.train()
        order = torch.randperm(
            len(frames), generator=torch.Generator().manual_seed(4 * 100_003 + epoch)
        ).numpy()
        for i in range(0, len(order), TINY["batch_size"]):
            idx = order[i : i + TINY["batch_size"]]
            ids, offsets = net.words([tasks[j] for j in idx])
            pred = torch.sigmoid(net.module(pixels[idx].float() / 255.0, ids, offsets))
            loss = progress_loss(pred, target[idx], is_success[idx], weight[idx], 0.8)
            opt.zero_grad()
            loss.backward()
            opt.step()

    streamed = load_model(out).module.state_dict()
    held = net.module.state_dict()
    assert streamed.keys() == held.keys()
    assert all(torch.equal(streamed[k], held[k]) for k in held)


def test_a_dataset_found_unusable_while_streaming_leaves_nothing(tmp_path: Path) -> None:
    data = _write(tmp_path / "failures", [False, False, False])
    out = tmp_path / "model"
    with pytest.raises(UnusableDataError, match="no successful episode"):
        fit_reward(FitOptions(str(data), str(out), epochs=1, **TINY))
    assert not out.exists()


def test_a_stopped_fit_keeps_its_checkpoint_not_its_frames(
    recording: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save = trainer._save_work

    def stop(work, net, opt, epoch, meta):  # noqa: ANN001, ANN202
        save(work, net, opt, epoch, meta)
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "_save_work", stop)
    out = tmp_path / "model"
    with pytest.raises(KeyboardInterrupt):
        fit_reward(FitOptions(str(recording), str(out), epochs=2, **TINY))
    assert sorted(p.name for p in (out / ".fit").iterdir()) == [
        "model.safetensors",
        "optimizer.safetensors",
        "state.json",
    ]
