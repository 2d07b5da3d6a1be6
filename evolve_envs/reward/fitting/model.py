"""The network a fit trains and the model directory it writes. `ProgressNet`, its config and the
directory's reading and writing (``config.json`` + ``model.safetensors``, no pickle) live with
the ``fitted`` backend that serves them
(:mod:`evolve_envs.reward.service.backends.progress_net`), a layer below this package; here is
how a fit builds one and keeps its weights between epochs.

Example:
    >>> net = build_model(input_size=16, channels=4, name="tiny")
    >>> net.config.input_size, net.config.backbone, sum(p.numel() for p in trainable(net)) > 0
    (16, False, True)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from evolve_envs.reward.service.backends.progress_net import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    ProgressNet,
    ProgressNetConfig,
    content_hash,
    load_backbone,
    load_model,
    pick_device,
    save_model,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "ProgressNet",
    "ProgressNetConfig",
    "build_model",
    "content_hash",
    "load_model",
    "load_weights",
    "pick_device",
    "save_model",
    "save_weights",
    "trainable",
]


def build_model(
    *,
    input_size: int,
    channels: int,
    name: str,
    backbone: str | os.PathLike[str] | None = None,
    device: str = "cpu",
) -> ProgressNet:
    """A new `ProgressNet` (initialised from torch's generator): convolutions on
    ``input_size``-pixel frames, or with ``backbone`` (a local transformers vision encoder,
    frozen) a head on that encoder, at the encoder's own input size when it has one."""
    encoder, dim = load_backbone(backbone, device) if backbone else (None, 0)
    size = int(getattr(encoder.config, "image_size", 0) or 0) if encoder is not None else 0
    config = ProgressNetConfig(
        input_size=size or input_size,
        channels=channels,
        backbone=encoder is not None,
        backbone_dim=dim,
        name=name,
    )
    return ProgressNet(config, backbone=encoder, device=device)


def trainable(net: ProgressNet) -> list[torch.nn.Parameter]:
    """The parameters a fit trains (a backbone's stay frozen)."""
    return [p for p in net.module.parameters() if p.requires_grad]


def save_weights(net: ProgressNet, path: str | os.PathLike[str]) -> None:
    """The fitted weights (a backbone's aside) into one safetensors file."""
    from safetensors.torch import save_file

    state = {
        k: v.detach().cpu().contiguous()
        for k, v in net.module.state_dict().items()
        if not k.startswith("backbone.")
    }
    save_file(state, str(Path(path)))


def load_weights(net: ProgressNet, path: str | os.PathLike[str]) -> None:
    """Weights written by :func:`save_weights` back into ``net``."""
    from safetensors.torch import load_file

    net.module.load_state_dict(load_file(str(Path(path)), device=net.device), strict=False)
