"""TOPReward on the transformers `vlm` backend: P("True") from the next-token logits.

The tiny random Qwen2.5-VL of `tiny_vlm.py` (built here, nothing downloaded) has whole-word
" True" and " False" tokens. Its answers are random, so the checks are exact relations: the
probabilities equal those of the first generation step (`generate(output_scores=True)`, another
code path of transformers), the service answers the same number over HTTP, and done follows it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from evolve_envs.reward.service.backends import make_backend
from evolve_envs.reward.service.backends.base import DoneItem
from evolve_envs.reward.service.backends.judge_presets import true_probability
from evolve_envs.reward.service.hosting.embedded import EmbeddedService
from tests.helpers.svc_helpers import painted, painted_b64

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

DEVICE = os.environ.get("EVOLVE_TEST_DEVICE", "cpu")
SIDE = 448
OPTIONS = {"top_logprobs": 1000, "done_threshold": 0.0}  # whole (400-token) vocabulary


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.reward.service.backends.tiny_vlm import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("tiny-qwen-topreward"))


@pytest.fixture(scope="module")
def backend(model_dir: Path) -> Iterator[object]:
    be = make_backend(
        "vlm", ckpt_path=str(model_dir), device=DEVICE, preset="topreward", preset_options=OPTIONS
    )
    yield be
    be.close()


def test_token_probabilities_are_the_first_generation_step(backend) -> None:
    import torch

    text, images = backend.judge.preset.progress_request("open the drawer", [painted(0)])
    (table,) = backend.token_probabilities([(text, images)], top_k=1000)
    assert sum(table.values()) == pytest.approx(1.0, abs=1e-4)
    inputs = backend._encode([(text, images)])
    with torch.inference_mode():
        out = backend.model.generate(
            **inputs, max_new_tokens=1, do_sample=False, output_scores=True,
            return_dict_in_generate=True, pad_token_id=backend.tokenizer.pad_token_id,
        )  # fmt: skip
    probs = torch.softmax(out.scores[0][0].float(), dim=-1)
    true_id = backend.tokenizer.convert_tokens_to_ids("ĠTrue")
    assert backend.tokenizer.decode([true_id]) == " True"
    assert table[" True"] == pytest.approx(float(probs[true_id]), rel=1e-4)
    assert true_probability(table) == pytest.approx(float(probs[true_id]), rel=1e-4)


def test_done_batch_reads_true_probability(backend) -> None:
    a, b = painted(0), painted(80)
    ((done, prob),) = backend.done_batch([DoneItem("open the drawer", a, a, b)])
    text, images = backend.judge.preset.progress_request("open the drawer", [a, b])
    (table,) = backend.token_probabilities([(text, images)], top_k=1000)
    assert prob == pytest.approx(true_probability(table)) and 0.0 < prob < 1.0
    assert done is True  # done_threshold 0 here


def test_served_over_http_with_the_same_number(backend, model_dir: Path) -> None:
    kwargs = {"device": DEVICE, "preset": "topreward", "preset_options": OPTIONS}
    extra = ["--ckpt-path", str(model_dir)]
    with EmbeddedService("vlm", kwargs, extra_args=extra, startup_timeout=180) as svc:
        caps = httpx.get(svc.url + "/capabilities", trust_env=False).json()
        assert caps["model_id"] == model_dir.name and caps["model_revision"].startswith("sha256:")
        body = {
            "task": "open the drawer",
            "first_frame": painted_b64(0, size=SIDE),
            "prev_frame": painted_b64(40, size=SIDE),
            "curr_frame": painted_b64(80, size=SIDE),
        }
        resp = httpx.post(svc.url + "/done", json=body, timeout=120, trust_env=False)
        assert resp.status_code == 200, resp.text
    a, b = painted(0, size=SIDE), painted(80, size=SIDE)  # the service's frame size: no resize
    ((_, expected),) = backend.done_batch([DoneItem("open the drawer", a, a, b)])
    assert resp.json()["prob"] == pytest.approx(expected, rel=1e-4)
    assert np.isfinite(resp.json()["prob"])
