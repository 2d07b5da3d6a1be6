"""``evolve-envs fit-reward`` on the shipped ReachPlace recording: a real (tiny) torch model fitted
for a few epochs, the model directory it writes read back without pickle, a fit interrupted
and resumed to the same weights as an uninterrupted one, and the datasets it refuses in one line
with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from evolve_envs.cli.main import main as cli_main
from evolve_envs.recording.episodes import EpisodeWriter
from evolve_envs.reward.fitting import trainer as fit_module
from evolve_envs.reward.fitting.data import UnusableDataError, load_episodes
from evolve_envs.reward.fitting.trainer import FitOptions, done_threshold, fit_reward
from evolve_envs.reward.service.backends import make_backend
from evolve_envs.reward.service.backends.base import CriticItem, DoneItem
from evolve_envs.reward.service.backends.progress_net import content_hash, load_model

TINY = {"input_size": 32, "channels": 8, "batch_size": 16, "progress": False, "held_out": 0.3}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("fit") / "rp-model"
    report = fit_reward(FitOptions("shipped", str(out), epochs=6, **TINY))
    return out, report


def test_the_model_directory_holds_weights_config_report_and_card(model) -> None:  # noqa: ANN001
    out, report = model
    names = {p.name for p in out.iterdir()}
    assert names == {"config.json", "model.safetensors", "report.json", "curves.png", "README.md"}
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "evolve-progress" and config["name"] == "rp-model"
    with safe_open(str(out / "model.safetensors"), framework="pt") as fh:  # tensors, no pickle
        assert fh.metadata()["model_type"] == "evolve-progress" and len(list(fh.keys())) > 5
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    written = json.loads((out / "report.json").read_text())
    assert written["content_hash"] == report["content_hash"] == content_hash(out)
    assert report["content_hash"] in (out / "README.md").read_text()
    # whole episodes held out: 10 shipped episodes, 3 held out, both outcomes among them
    held = written["held_out_ids"]
    assert len(held) == 3 and written["held_out"]["episodes"] == 3
    assert 0 < written["held_out"]["successes"] < 3
    assert written["train"]["episodes"] == 7 and not set(held) & set(written["train_ids"])
    assert report["losses"][-1] < report["losses"][0]  # it fitted something


def test_done_gap_labels_the_frames_before_done_below_the_failure_cap(tmp_path: Path) -> None:
    out = tmp_path / "gap"
    code = cli_main(["fit-reward", "shipped", "--out", str(out), "--epochs", "1", "--done-gap",
                     "--failure-cap", "0.7", "--input-size", "32", "--channels", "8",
                     "--held-out", "0.3", "--no-progress"])  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["options"]["done_gap"] is True
    solved = [c for c in report["held_out_curves"] if c["success"]]
    assert solved
    for curve in solved:
        label = curve["label"]
        assert label[-1] == 1.0 and max(label[:-1]) <= 0.7 + 1e-6
        assert np.all(np.diff(label) > 0)  # still in order: the VOC reads the same
    assert "t / T x 0.7" in (out / "README.md").read_text()


def test_done_on_frame_picks_the_threshold_on_every_frame(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    # the rules themselves are in done_threshold's doctest; a two-epoch fit scores every frame
    # alike, so here the rule the fit used is read from the call
    calls = []

    def spy(scores, success, done_on="episode"):  # noqa: ANN001, ANN202
        calls.append((len(scores), list(success), done_on))
        return done_threshold(scores, success, done_on)

    monkeypatch.setattr(fit_module, "done_threshold", spy)
    out = tmp_path / "frame"
    code = cli_main(["fit-reward", "shipped", "--out", str(out), "--epochs", "2", "--done-on",
                     "frame", "--input-size", "32", "--channels", "8", "--held-out", "0.3",
                     "--no-progress"])  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["options"]["done_on"] == "frame"
    [(episodes, success, rule)] = calls  # once, on the training episodes, by frame
    assert (episodes, sum(success), rule) == (7, report["train"]["successes"], "frame")
    assert "a success's last frame against every other frame" in (out / "README.md").read_text()
    with pytest.raises(ValueError, match="done_on"):
        fit_reward(FitOptions("shipped", str(tmp_path / "bad"), done_on="last", **TINY))  # type: ignore[arg-type]
    assert not (tmp_path / "bad").exists()


def test_the_served_backend_answers_what_the_model_predicts(model) -> None:  # noqa: ANN001
    out, report = model
    net = load_model(out)
    backend = make_backend("fitted", ckpt_path=str(out), device="cpu")
    assert backend.model_identity() == ("rp-model", report["content_hash"])
    assert backend.capabilities().pairwise and backend.capabilities().done
    (episode,) = [e for e in load_episodes("shipped", input_size=32) if e.episode_id == "00-task"]
    first, last = episode.frames[0], episode.frames[-1]
    p = net.predict(episode.frames[[0, -1]], [episode.task] * 2)
    pct = [100.0 if v >= net.config.done_threshold else 100.0 * float(v) for v in p]
    (critic,) = backend.critic_batch([CriticItem(episode.task, first, last, first)])
    expected = 100.0 * (pct[1] - pct[0]) / (100.0 - pct[0]) if pct[0] < 100 else 0.0
    assert critic == pytest.approx(max(-100.0, min(100.0, expected)), abs=1e-4)
    ((done, prob),) = backend.done_batch([DoneItem(episode.task, first, first, last)])
    assert prob == pytest.approx(pct[1] / 100.0, abs=1e-6)
    assert done == (p[1] >= net.config.done_threshold)


def test_an_interrupted_fit_resumes_to_the_same_weights(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    straight = tmp_path / "straight"
    fit_reward(FitOptions("shipped", str(straight), epochs=3, **TINY))
    save = fit_module._save_work

    def stop_after_two(work, net, opt, epoch, meta):  # noqa: ANN001
        save(work, net, opt, epoch, meta)
        if epoch == 2:
            raise KeyboardInterrupt

    resumed = tmp_path / "resumed"
    monkeypatch.setattr(fit_module, "_save_work", stop_after_two)
    with pytest.raises(KeyboardInterrupt):
        fit_reward(FitOptions("shipped", str(resumed), epochs=3, **TINY))
    assert json.loads((resumed / ".fit" / "state.json").read_text())["epoch"] == 2
    assert not (resumed / "model.safetensors").exists()
    monkeypatch.setattr(fit_module, "_save_work", save)
    with pytest.raises(UnusableDataError, match="interrupted fit of other data or options"):
        fit_reward(FitOptions("shipped", str(resumed), epochs=3, seed=1, **TINY))
    report = fit_reward(FitOptions("shipped", str(resumed), epochs=3, **TINY))
    assert len(report["losses"]) == 3 and not (resumed / ".fit").exists()
    a, b = load_model(straight).module.state_dict(), load_model(resumed).module.state_dict()
    assert all(np.allclose(a[k].numpy(), b[k].numpy(), atol=1e-5) for k in a)


def _one_episode(root: Path) -> Path:
    writer = EpisodeWriter(root)
    frames = [np.zeros((16, 16, 3), np.uint8)] * 3
    last = {"action": [0.0, 0.0], "terminated": True, "is_success": True}
    writer.write(frames, [{}, {"action": [0.0, 0.0]}, last], {"task": "reach", "success": True})
    return root


@pytest.mark.parametrize(
    ("make", "extra", "says"),
    [
        (_one_episode, [], "has 1 episode(s); fitting needs at least two"),
        (lambda root: root, [], "is neither a LeRobotDataset v3 folder"),
        (lambda root: Path("shipped"), ["--camera", "wrist"], "has no camera 'wrist'"),
    ],
)
def test_an_unusable_dataset_fails_in_one_line_with_nothing_written(
    tmp_path: Path,
    capsys,
    make,
    extra,
    says,  # noqa: ANN001
) -> None:
    data = make(tmp_path / "data")
    out = tmp_path / "model"
    argv = ["fit-reward", str(data), "--out", str(out), "--epochs", "1", "--no-progress", *extra]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err and err.startswith("evolve-envs fit-reward: error")
    assert not out.exists()
