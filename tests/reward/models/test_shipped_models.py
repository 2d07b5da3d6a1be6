"""The shipped LIBERO-Object progress model: found by name, loaded with no pickle, served by the
``fitted`` backend, and its identity is the content hash its card names."""

from __future__ import annotations

import numpy as np
import pytest

from evolve_envs.reward.models import SHIPPED_MODELS, resolve_model, shipped_model
from evolve_envs.reward.service.backends.fitted import FittedProgressBackend
from evolve_envs.reward.service.backends.progress_net import content_hash

TASK = "pick up the alphabet soup and place it in the basket"


def test_every_shipped_model_is_in_the_package_with_its_card() -> None:
    for name in SHIPPED_MODELS:
        folder = shipped_model(name)
        for part in ("config.json", "model.safetensors", "README.md", "report.json"):
            assert (folder / part).is_file(), part
        assert content_hash(folder) in (folder / "README.md").read_text()
    with pytest.raises(ValueError, match="no shipped model 'vlac'"):
        resolve_model("shipped:vlac")


def test_the_fitted_backend_serves_it_by_name() -> None:
    backend = FittedProgressBackend(ckpt_path="shipped:libero_object")
    assert backend.model_id == "libero-object-progress"
    assert backend.ckpt_path == str(shipped_model("libero_object"))
    frames = [np.zeros((64, 64, 3), np.uint8), np.full((64, 64, 3), 128, np.uint8)]
    progress = backend.net.predict(frames, [TASK, TASK])
    assert np.shape(progress) == (2,) and np.all((0 <= progress) & (progress <= 1))
