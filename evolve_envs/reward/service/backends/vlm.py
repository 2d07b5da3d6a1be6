"""VLMBackend: a vision-language model (Qwen2.5-VL family) through `transformers`, loaded from a
local directory (never downloaded); prompts and parsing in docs/reward-models.md.

Example:
    >>> backend = VLMBackend("/models/Qwen2.5-VL-7B-Instruct", device="cuda")  # doctest: +SKIP
    >>> backend.capabilities().video  # doctest: +SKIP
    True
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from evolve_envs.reward.service.backends.answer_parsing import SCORE_MODES
from evolve_envs.reward.service.backends.base import (
    CKPT_ENV,
    Backend,
    BackendError,
)
from evolve_envs.reward.service.backends.prompt_text import token_pattern
from evolve_envs.reward.service.backends.vlm_judge import (
    DEFAULT_PROMPTS,
    DEFAULT_SYSTEM_PROMPT,
    IMAGE_MARK,
    VLMJudge,
)

__all__ = ["VLMBackend"]

log = logging.getLogger("evolve_envs.reward.service.vlm")

_IMAGE_SLOT = "<|vision_start|><|image_pad|><|vision_end|>"
_IMAGE_PAD = "<|image_pad|>"
_PLACEHOLDER = "\x00IMG\x00"


class VLMBackend(VLMJudge):
    """Reward judgements from a Qwen2.5-VL-style model (see module docs).

    Args:
        ckpt_path: model directory (default `$VLAC_CKPT_PATH`).
        device: "auto" (CUDA if available), "cpu", "cuda", "cuda:1", ...
        dtype: "auto" (bfloat16 on CUDA, float32 on CPU), or a torch dtype name.
        model_class: the `transformers` class that loads the checkpoint.
        max_new_tokens: generation budget for critic/done/image answers.
        video_max_new_tokens: generation budget for video answers (may think first).
        score_mode: "auto" | "percentage" | "unit" (how score answers are read).
        caller_max_new_tokens: the most `max_new_tokens` a `/score` caller may ask for (422
            above it); the caller's `score_mode` must be one of the modes (422 otherwise).
        temperature: 0 for greedy decoding.
        min_pixels, max_pixels: image processor resolution bounds (None: the checkpoint's).
        done_threshold: progress percentage at which `/done` says done.
        fallback_critic, fallback_score: values used when an answer has no number.
        system_prompt, pairwise_prompt, progress_prompt, video_prompt, image_prompt: prompts.
        attn_implementation: e.g. "sdpa" or "flash_attention_2" (None: the library default).
        generation_kwargs: extra `model.generate` arguments (e.g. `repetition_penalty`).
        preset: a judge preset (`roboreward`, `robodopamine`, `topreward`; see
            `judge_presets`): its prompts and strict answer reading replace the prompts above.
        preset_options: the preset's options (e.g. `done_threshold`).
        disabled: optional capabilities to switch off.
    """

    name = "vlm"

    def __init__(
        self,
        ckpt_path: str | None = None,
        *,
        device: str = "auto",
        dtype: str = "auto",
        model_class: str = "Qwen2_5_VLForConditionalGeneration",
        max_new_tokens: int = 32,
        video_max_new_tokens: int = 256,
        score_mode: str = "auto",
        temperature: float = 0.0,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        done_threshold: float = 95.0,
        fallback_critic: float = 0.0,
        fallback_score: float = 0.0,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        pairwise_prompt: str = DEFAULT_PROMPTS["pairwise_prompt"],
        progress_prompt: str = DEFAULT_PROMPTS["progress_prompt"],
        video_prompt: str = DEFAULT_PROMPTS["video_prompt"],
        image_prompt: str = DEFAULT_PROMPTS["image_prompt"],
        attn_implementation: str | None = None,
        generation_kwargs: dict[str, object] | None = None,
        caller_max_new_tokens: int = 1024,
        preset: str | None = None,
        preset_options: dict[str, object] | None = None,
        disabled: Iterable[str] = (),
    ) -> None:
        super().__init__(disabled=disabled)
        if score_mode not in SCORE_MODES:
            raise ValueError(f"score_mode must be one of {SCORE_MODES}, got {score_mode!r}")
        path = ckpt_path or os.environ.get(CKPT_ENV)
        if not path:
            raise ValueError(
                f"the vlm backend needs a model directory: --ckpt-path, ${CKPT_ENV} or the "
                "ckpt_path backend kwarg (models are never downloaded)"
            )
        if not os.path.isdir(path):
            raise ValueError(f"model directory {path!r} does not exist (nothing is downloaded)")
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise ValueError(f"{path!r} holds no config.json: not a transformers model directory")
        self.ckpt_path = path
        self._set_judge_options(
            max_new_tokens=max_new_tokens,
            video_max_new_tokens=video_max_new_tokens,
            caller_max_new_tokens=caller_max_new_tokens,
            score_mode=score_mode,
            temperature=temperature,
            done_threshold=done_threshold,
            fallback_critic=fallback_critic,
            fallback_score=fallback_score,
            system_prompt=system_prompt,
            prompts={
                "pairwise": pairwise_prompt,
                "progress": progress_prompt,
                "video": video_prompt,
                "image": image_prompt,
            },
        )
        self.generation_kwargs = dict(generation_kwargs or {})
        self.unparsable_answers = 0
        self._set_preset(preset, preset_options)
        self._load(path, device, dtype, model_class, min_pixels, max_pixels, attn_implementation)

    # --- loading --------------------------------------------------------------------------------
    def _load(
        self,
        path: str,
        device: str,
        dtype: str,
        model_class: str,
        min_pixels: int | None,
        max_pixels: int | None,
        attn_implementation: str | None,
    ) -> None:
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise BackendError(
                "the vlm backend needs torch and transformers: pip install 'evolve-envs[models]'"
            ) from exc
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        else:
            torch_dtype = getattr(torch, dtype, None)
            if not isinstance(torch_dtype, torch.dtype):
                raise ValueError(f"unknown dtype {dtype!r}")
        cls = getattr(transformers, model_class, None)
        if cls is None:
            raise ValueError(f"transformers has no model class {model_class!r}")
        pixel_kwargs = {
            k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v
        }
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.image_processor = transformers.Qwen2VLImageProcessor.from_pretrained(
                path, local_files_only=True, **pixel_kwargs
            )
            model_kwargs: dict[str, object] = {"local_files_only": True, "dtype": torch_dtype}
            if attn_implementation:
                model_kwargs["attn_implementation"] = attn_implementation
            self.model = cls.from_pretrained(path, **model_kwargs).to(device).eval()
        except (OSError, ValueError) as exc:
            raise BackendError(f"cannot load the model in {path!r}: {exc}") from exc
        self._torch = torch
        self.device = device
        self.dtype = torch_dtype
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._template_tokens = token_pattern(
            [*self.tokenizer.all_special_tokens, *self.tokenizer.get_added_vocab()]
        )
        log.info("vlm backend: %s (%s) on %s, %s", path, model_class, device, torch_dtype)

    def _chat_text(self, n_images: int, text: str) -> str:
        system = (
            f"<|im_start|>system\n{self.system_prompt}<|im_end|>\n" if self.system_prompt else ""
        )
        if n_images and text.count(IMAGE_MARK) == n_images:  # images where the prompt puts them
            user = text.replace(IMAGE_MARK, _IMAGE_SLOT)
        else:
            user = f"{_IMAGE_SLOT * n_images}{text}"
        return f"{system}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"

    def model_identity(self) -> tuple[str | None, str | None]:
        """The model directory's id and fingerprint (`model_fingerprint`), computed once."""
        if not hasattr(self, "_identity"):
            from evolve_envs.reward.service.backends.model_fingerprint import (
                model_fingerprint,
                model_id_from_path,
            )

            self._identity = (model_id_from_path(self.ckpt_path), model_fingerprint(self.ckpt_path))
        return self._identity

    def _encode(self, requests: Sequence[tuple[str, Sequence[np.ndarray]]]) -> dict[str, object]:
        """Model inputs (on the model's device) of a batch of `(prompt text, images)`."""
        flat = [np.ascontiguousarray(img) for _, imgs in requests for img in imgs]
        vision = self.image_processor(images=flat, return_tensors="pt") if flat else {}
        grid = vision.get("image_grid_thw")
        merge = int(getattr(self.image_processor, "merge_size", 2))
        texts, k = [], 0
        for text, imgs in requests:
            chat = self._chat_text(len(imgs), text)
            for _ in imgs:
                n_tokens = int(grid[k].prod()) // (merge * merge)
                chat = chat.replace(_IMAGE_PAD, _PLACEHOLDER * n_tokens, 1)
                k += 1
            texts.append(chat.replace(_PLACEHOLDER, _IMAGE_PAD))
        enc = self.tokenizer(texts, return_tensors="pt", padding=True)
        inputs: dict[str, object] = {key: value.to(self.device) for key, value in enc.items()}
        if flat:
            inputs["pixel_values"] = vision["pixel_values"].to(self.device, dtype=self.dtype)
            inputs["image_grid_thw"] = grid.to(self.device)
        return inputs

    def token_probabilities(
        self, requests: Sequence[tuple[str, Sequence[np.ndarray]]], top_k: int = 20
    ) -> list[dict[str, float]]:
        """The `top_k` likeliest first answer tokens per request, from the next-token logits."""
        torch = self._torch
        inputs = self._encode(requests)
        with torch.inference_mode():
            logits = self.model(**inputs).logits[:, -1, :].float()
        probs = torch.softmax(logits, dim=-1)
        top = torch.topk(probs, k=min(int(top_k), probs.shape[-1]), dim=-1)
        out = []
        for values, ids in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            table: dict[str, float] = {}
            for p, i in zip(values, ids, strict=True):
                text = self.tokenizer.decode([i])
                table[text] = table.get(text, 0.0) + float(p)
            out.append(table)
        return out

    def generate(
        self,
        requests: Sequence[tuple[str, Sequence[np.ndarray]]],
        max_new_tokens: int,
        stop: threading.Event | None = None,
    ) -> list[str]:
        """Answer a batch of `(prompt text, images)` requests; returns the decoded answers.

        Generation ends early (after the current token) once `stop` is set.
        """
        torch = self._torch
        inputs = self._encode(requests)
        prompt_len = inputs["input_ids"].shape[1]
        sampling: dict[str, object] = {"do_sample": False}
        if self.temperature > 0:
            sampling = {"do_sample": True, "temperature": self.temperature}
        if stop is not None:
            from transformers import StoppingCriteria, StoppingCriteriaList

            class _StopWhenSet(StoppingCriteria):
                def __call__(self, input_ids: Any, scores: Any, **kwargs: object) -> Backend:
                    return torch.full(
                        (input_ids.shape[0],),
                        stop.is_set(),
                        dtype=torch.bool,
                        device=input_ids.device,
                    )

            sampling["stopping_criteria"] = StoppingCriteriaList([_StopWhenSet()])
        with torch.inference_mode():
            out = self.model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                **{**sampling, **self.generation_kwargs},
            )
        new_tokens = out[:, prompt_len:]
        return self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)

    def close(self) -> None:
        self.model = None
        if self.device.startswith("cuda"):
            self._torch.cuda.empty_cache()
