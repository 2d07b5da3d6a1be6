"""A small progress model (frame + task text -> progress in [0, 1]), `ProgressNet`, and its model
directory (``config.json``, ``model.safetensors``, optional ``backbone/``); see docs/fit-reward.md.

Example:
    >>> import numpy as np
    >>> net = ProgressNet(ProgressNetConfig(input_size=32, channels=8, hidden=16))
    >>> net.predict(np.zeros((2, 48, 48, 3), np.uint8), ["pick up the block"] * 2).shape
    (2,)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "MODEL_TYPE",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "BACKBONE_DIR",
    "ProgressNetConfig",
    "ProgressNet",
    "is_model_dir",
    "save_model",
    "load_model",
    "content_hash",
    "hash_words",
    "pick_device",
]

MODEL_TYPE = "evolve-progress"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
BACKBONE_DIR = "backbone"
_WORD = re.compile(r"[a-z0-9]+")


@dataclass
class ProgressNetConfig:
    """The architecture (and the serving defaults) of a `ProgressNet`, saved as ``config.json``.

    >>> ProgressNetConfig(channels=8).to_json()["model_type"]
    'evolve-progress'
    """

    input_size: int = 64
    channels: int = 16
    text_buckets: int = 1024
    text_dim: int = 32
    hidden: int = 128
    #: a transformers vision encoder under ``backbone/`` (frozen), in place of the convolutions
    backbone: bool = False
    backbone_dim: int = 0
    #: progress at or above this is "done" (chosen when fitting)
    done_threshold: float = 0.95
    name: str = "progress-model"

    def to_json(self) -> dict[str, object]:
        return {"model_type": MODEL_TYPE, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, body: dict[str, object]) -> ProgressNetConfig:
        if body.get("model_type") != MODEL_TYPE:
            raise ValueError(f"not a progress model config (model_type {body.get('model_type')!r})")
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in body.items() if k in known})


def hash_words(text: str, buckets: int) -> list[int]:
    """The task's words as bucket ids (CRC32, stable across runs and machines).

    >>> hash_words("Pick up the block", 1024) == hash_words("pick up the  block!", 1024)
    True
    """
    words = _WORD.findall(text.lower()) or ["<empty>"]
    return [zlib.crc32(w.encode()) % buckets for w in words]


def pick_device(device: str | None) -> str:
    """``auto``/None: ``cuda`` when torch sees a GPU, else ``cpu``; anything else as given."""
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch comes with the models extra
        raise ImportError("the progress model needs torch: pip install 'evolve-envs[fit]'") from exc
    return torch


def _build(config: ProgressNetConfig, backbone: Any = None) -> Any:
    torch = _torch()
    nn = torch.nn

    class _Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c = config.channels
            self.config = config
            self.backbone = backbone
            if backbone is None:
                self.convs = nn.Sequential(
                    nn.Conv2d(5, c, 5, stride=2, padding=2),
                    nn.GroupNorm(4, c),
                    nn.ReLU(),
                    nn.Conv2d(c, c, 3, stride=1, padding=1),
                    nn.GroupNorm(4, c),
                    nn.ReLU(),
                    nn.Conv2d(c, c, 3, stride=1, padding=1),
                )
                # sharp attention from the start: each map's softmax picks out its object
                self.log_temperature = nn.Parameter(torch.tensor(2.0))
                image_dim = 3 * c  # (x, y) per map + its mean activation
            else:
                image_dim = config.backbone_dim
            self.text = nn.EmbeddingBag(config.text_buckets, config.text_dim, mode="mean")
            self.norm = nn.LayerNorm(image_dim + config.text_dim)
            self.head = nn.Sequential(
                nn.Linear(image_dim + config.text_dim, config.hidden),
                nn.ReLU(),
                nn.Linear(config.hidden, config.hidden),
                nn.ReLU(),
                nn.Linear(config.hidden, 1),
            )

        def image_features(self, images: Any) -> Any:
            if self.backbone is not None:
                with torch.no_grad():
                    out = self.backbone(pixel_values=images * 2.0 - 1.0)
                pooled = getattr(out, "pooler_output", None)
                return pooled if pooled is not None else out.last_hidden_state.mean(dim=1)
            n, _, h, w = images.shape
            ys = torch.linspace(-1, 1, h, device=images.device).view(1, 1, h, 1).expand(n, 1, h, w)
            xs = torch.linspace(-1, 1, w, device=images.device).view(1, 1, 1, w).expand(n, 1, h, w)
            maps = self.convs(torch.cat([images, xs, ys], dim=1))
            flat = maps.flatten(2)
            attn = torch.softmax(flat * self.log_temperature.exp(), dim=-1)
            gx = torch.linspace(-1, 1, maps.shape[3], device=images.device).repeat(maps.shape[2])
            gy = torch.linspace(-1, 1, maps.shape[2], device=images.device).repeat_interleave(
                maps.shape[3]
            )
            kx, ky = (attn * gx).sum(-1), (attn * gy).sum(-1)
            return torch.cat([kx, ky, torch.relu(flat).mean(-1)], dim=1)

        def forward(self, images: Any, words: Any, offsets: Any) -> Any:
            """Logits of progress for float images ``[N, 3, S, S]`` in [0, 1] and hashed words."""
            feats = torch.cat([self.image_features(images), self.text(words, offsets)], dim=1)
            feats = self.norm(feats)
            return self.head(feats).squeeze(-1)

    return _Net()


class ProgressNet:
    """A progress model: `predict` frames and task texts -> progress in [0, 1] (module docs).

    ``module`` is the torch module (for fitting); the wrapper does the resizing and the words.

    >>> net = ProgressNet(ProgressNetConfig(input_size=16, channels=4, hidden=8))
    >>> net.predict(np.zeros((1, 16, 16, 3), np.uint8), ["reach"]).shape
    (1,)
    """

    def __init__(
        self, config: ProgressNetConfig, *, backbone: Any = None, device: str | None = "cpu"
    ) -> None:
        _torch()
        self.config = config
        self.device = pick_device(device)
        self.module = _build(config, backbone).to(self.device)

    def images(self, frames: np.ndarray | Sequence[np.ndarray]) -> Any:
        """uint8 frames ``[N, H, W, 3]`` as float tensors ``[N, 3, S, S]`` in [0, 1]."""
        torch = _torch()
        size = self.config.input_size
        shapes = {np.shape(f) for f in frames}
        groups = [np.stack(frames)] if len(shapes) == 1 else [np.asarray(f)[None] for f in frames]
        out = []
        for group in groups:  # one tensor op per size of frame
            t = torch.as_tensor(np.ascontiguousarray(group[..., :3]), device=self.device)
            t = t.permute(0, 3, 1, 2).float() / 255.0
            if t.shape[-2:] != (size, size):
                t = torch.nn.functional.interpolate(
                    t, size=(size, size), mode="bilinear", antialias=True, align_corners=False
                )
            out.append(t)
        return torch.cat(out, dim=0)

    def words(self, tasks: Sequence[str]) -> tuple[Any, Any]:
        """The tasks' hashed words as an ``EmbeddingBag`` input (flat ids, offsets)."""
        torch = _torch()
        ids, offsets = [], []
        for task in tasks:
            offsets.append(len(ids))
            ids.extend(hash_words(task, self.config.text_buckets))
        return (
            torch.tensor(ids, dtype=torch.long, device=self.device),
            torch.tensor(offsets, dtype=torch.long, device=self.device),
        )

    def predict(
        self, frames: np.ndarray | Sequence[np.ndarray], tasks: Sequence[str], batch: int = 256
    ) -> np.ndarray:
        """Progress in [0, 1] of each frame for its task (no gradients)."""
        torch = _torch()
        if len(frames) != len(tasks):
            raise ValueError(f"{len(frames)} frames but {len(tasks)} tasks")
        self.module.eval()
        out = []
        with torch.no_grad():
            for i in range(0, len(frames), batch):
                images = self.images(frames[i : i + batch])
                ids, offsets = self.words(tasks[i : i + batch])
                out.append(torch.sigmoid(self.module(images, ids, offsets)).float().cpu())
        return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def is_model_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a progress model directory (its config names the model type)."""
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("model_type") == MODEL_TYPE
    except (OSError, ValueError, AttributeError):
        return False


def _trainable_state(net: ProgressNet) -> dict[str, object]:
    return {k: v for k, v in net.module.state_dict().items() if not k.startswith("backbone.")}


def save_model(net: ProgressNet, root: str | os.PathLike[str]) -> None:
    """Write ``config.json``, ``model.safetensors`` and (with a backbone) ``backbone/``."""
    from safetensors.torch import save_file

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in _trainable_state(net).items()}
    save_file(state, str(root / WEIGHTS_FILE), metadata={"model_type": MODEL_TYPE})
    if net.module.backbone is not None:
        net.module.backbone.save_pretrained(str(root / BACKBONE_DIR), safe_serialization=True)
    (root / CONFIG_FILE).write_text(json.dumps(net.config.to_json(), indent=2) + "\n")


def load_backbone(path: str | os.PathLike[str], device: str = "cpu") -> tuple[Any, int]:
    """A transformers vision encoder from a local folder (safetensors only, never downloaded),
    frozen, and the size of its pooled output."""
    try:
        from transformers import AutoModel
    except ImportError as exc:  # pragma: no cover - transformers comes with the models extra
        raise ImportError(
            "a backbone needs transformers: pip install 'evolve-envs[models]'"
        ) from exc
    model = AutoModel.from_pretrained(str(path), local_files_only=True, use_safetensors=True)
    model.requires_grad_(False)
    model.eval()
    dim = int(
        getattr(model.config, "hidden_size", 0) or getattr(model.config, "hidden_sizes", [0])[-1]
    )
    return model.to(device), dim


def load_model(root: str | os.PathLike[str], device: str | None = "cpu") -> ProgressNet:
    """The `ProgressNet` of a model directory (safetensors and JSON only; no pickle)."""
    from safetensors.torch import load_file

    root = Path(root)
    if not is_model_dir(root):
        raise ValueError(
            f"{root} is not a progress model directory (no {CONFIG_FILE} of type {MODEL_TYPE!r})"
        )
    config = ProgressNetConfig.from_json(json.loads((root / CONFIG_FILE).read_text()))
    device = pick_device(device)
    backbone = load_backbone(root / BACKBONE_DIR, device)[0] if config.backbone else None
    net = ProgressNet(config, backbone=backbone, device=device)
    state = load_file(str(root / WEIGHTS_FILE), device=device)
    missing, unexpected = net.module.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("backbone.")]
    if missing or unexpected:
        raise ValueError(
            f"{root / WEIGHTS_FILE} does not fit its config: missing {missing}, "
            f"unexpected {unexpected}"
        )
    net.module.eval()
    return net


def content_hash(root: str | os.PathLike[str]) -> str:
    """``sha256:<16 hex>`` over the config and every weight file (the backbone's too), whole."""
    root = Path(root)
    files = [root / CONFIG_FILE, root / WEIGHTS_FILE]
    backbone = root / BACKBONE_DIR
    if backbone.is_dir():
        files += sorted(p for p in backbone.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):  # noqa: B023
                digest.update(block)
    return "sha256:" + digest.hexdigest()[:16]
