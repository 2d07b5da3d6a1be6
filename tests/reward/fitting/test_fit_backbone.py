"""``fit-reward --backbone PATH``: a head fitted on a transformers vision encoder from a local
folder, here a tiny randomly initialised ViT written by ``save_pretrained`` (nothing is
downloaded). The encoder stays frozen, travels inside the model directory (safetensors) and
counts in the model's identity; the ``fitted`` backend serves the result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from evolve_envs.reward.fitting.trainer import FitOptions, fit_reward
from evolve_envs.reward.service.backends import make_backend
from evolve_envs.reward.service.backends.base import DoneItem
from evolve_envs.reward.service.backends.progress_net import content_hash, load_model

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=16,
                                    num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=32)  # fmt: skip
    path = tmp_path_factory.mktemp("encoder") / "tiny-vit"
    transformers.ViTModel(config).save_pretrained(str(path), safe_serialization=True)
    assert (path / "model.safetensors").is_file()
    return path


def test_a_head_is_fitted_on_a_local_encoder_and_served(encoder: Path, tmp_path: Path) -> None:
    out = tmp_path / "vit-head"
    frozen = {k: v.clone() for k, v in transformers.ViTModel.from_pretrained(
        str(encoder)).state_dict().items()}  # fmt: skip
    report = fit_reward(FitOptions("shipped", str(out), epochs=3, batch_size=16,
                                   backbone=str(encoder), progress=False))  # fmt: skip
    config = json.loads((out / "config.json").read_text())
    assert config["backbone"] is True and config["backbone_dim"] == 16
    assert config["input_size"] == 32  # the encoder's own input size
    assert (out / "backbone" / "model.safetensors").is_file()
    assert report["content_hash"] == content_hash(out)
    net = load_model(out)
    saved = net.module.backbone.state_dict()
    assert all(torch.equal(saved[k], frozen[k]) for k in frozen)  # the encoder was not trained
    head = [p for n, p in net.module.named_parameters() if not n.startswith("backbone.")]
    assert report["parameters"] == sum(p.numel() for p in head)  # the head alone is trained
    backend = make_backend("fitted", ckpt_path=str(out), device="cpu")
    frame = np.zeros((448, 448, 3), np.uint8)
    ((done, prob),) = backend.done_batch([DoneItem("reach", frame, frame, frame)])
    assert 0.0 <= prob <= 1.0 and isinstance(done, bool)
