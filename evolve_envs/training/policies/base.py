"""The policy interface the learners train (:class:`Policy`: ``encode_obs`` on the workers,
``forward`` to a distribution and a value) and a CPU-sized CNN policy."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn
from torch.distributions import Distribution, Independent, Normal

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = ["CNNGaussianPolicy", "Policy", "SpatialSoftmax", "downscale_images"]


class Policy(nn.Module, abc.ABC):
    """Interface between the trainers and a policy network: subclasses implement :meth:`encode_obs`
    and :meth:`forward`. Actions come back *unclipped*: the env clips them, the learner penalises
    those outside the action space.

    >>> class Still(Policy):  # actions: Normal(0, 1) on 2 dims; value: the sum of the state
    ...     def encode_obs(self, obs): return {"state": obs["state"].astype(np.float32)}
    ...     def forward(self, x):
    ...         s = x["state"]
    ...         return Independent(Normal(torch.zeros(len(s), 2), 1.0), 1), s.sum(-1)
    >>> pol = Still()
    >>> inputs = pol.encode_obs({"state": np.ones((3, 4))})
    >>> pol.act(inputs, deterministic=True)[0].tolist(), pol.value(inputs).tolist()
    ([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], [4.0, 4.0, 4.0])
    """

    @abc.abstractmethod
    def encode_obs(self, obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Batched environment observation (leading dim ``B``) -> compact NumPy policy inputs."""

    @abc.abstractmethod
    def forward(self, inputs: dict[str, torch.Tensor]) -> tuple[Distribution, torch.Tensor]:
        """Inputs ``[B, ...]`` -> (action distribution over ``[B, A]``, value ``[B]``)."""

    def to_inputs(self, inputs: Mapping[str, np.ndarray | torch.Tensor]) -> dict[str, torch.Tensor]:
        """NumPy inputs -> tensors on the policy's device (read-only arrays, as Ray hands them
        out, are copied)."""
        device = _module_device(self)
        out: dict[str, torch.Tensor] = {}
        for k, v in inputs.items():
            if isinstance(v, torch.Tensor):
                out[k] = v.to(device)
                continue
            arr = np.asarray(v)
            if not arr.flags.writeable:
                arr = arr.copy()
            out[k] = torch.as_tensor(arr, device=device)
        return out

    @torch.no_grad()
    def act(
        self, inputs: Mapping[str, np.ndarray], *, deterministic: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sample actions ``[B, A]`` float32 (unclipped) and their log-probs ``[B]`` float32.

        With ``deterministic`` the distribution's mean is returned (log-prob of the mean)."""
        dist, _ = self(self.to_inputs(inputs))
        actions = dist.mean if deterministic else dist.sample()
        logp = dist.log_prob(actions)
        return (
            actions.detach().cpu().numpy().astype(np.float32, copy=False),
            logp.detach().cpu().numpy().astype(np.float32, copy=False),
        )

    @torch.no_grad()
    def value(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Value estimates ``[B]`` float32 for NumPy inputs."""
        _, v = self(self.to_inputs(inputs))
        return v.detach().cpu().numpy().astype(np.float32, copy=False)


def _module_device(module: nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


def downscale_images(images: np.ndarray, size: int) -> np.ndarray:
    """Resize ``[B, H, W, C]`` uint8 frames to ``[B, size, size, C]``: area averaging when the size
    divides, nearest neighbour otherwise."""
    images = np.asarray(images)
    if images.ndim != 4:
        raise ValueError(f"downscale_images: expected [B, H, W, C], got shape {images.shape}")
    b, h, w, c = images.shape
    if (h, w) == (size, size):
        return np.ascontiguousarray(images, dtype=np.uint8)
    if h % size == 0 and w % size == 0:
        fh, fw = h // size, w // size
        blocks = images.reshape(b, size, fh, size, fw, c).astype(np.float32)
        return np.rint(blocks.mean(axis=(2, 4))).clip(0, 255).astype(np.uint8)
    rows = (np.arange(size) * h // size).clip(0, h - 1)
    cols = (np.arange(size) * w // size).clip(0, w - 1)
    return np.ascontiguousarray(images[:, rows][:, :, cols], dtype=np.uint8)


class SpatialSoftmax(nn.Module):
    """Feature maps ``[B, K, H, W]`` -> expected image coordinates ``[B, 2K]`` in ``[-1, 1]`` (a
    softmax keypoint per channel, learnable temperature).

    >>> maps = torch.full((1, 1, 3, 3), -50.0)
    >>> maps[0, 0, 0, 2] = 50.0  # one channel peaking in the top right corner
    >>> SpatialSoftmax()(maps).round(decimals=3).tolist()  # x, then y
    [[1.0, -1.0]]
    """

    def __init__(self) -> None:
        super().__init__()
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        b, k, h, w = maps.shape
        probs = torch.softmax(maps.reshape(b, k, h * w) / self.log_temperature.exp(), dim=-1)
        ys, xs = torch.meshgrid(
            torch.linspace(-1.0, 1.0, h, device=maps.device, dtype=maps.dtype),
            torch.linspace(-1.0, 1.0, w, device=maps.device, dtype=maps.dtype),
            indexing="ij",
        )
        x = (probs * xs.reshape(1, 1, -1)).sum(-1)
        y = (probs * ys.reshape(1, 1, -1)).sum(-1)
        return torch.cat([x, y], dim=-1)


class CNNGaussianPolicy(Policy):
    """Small CNN over a downscaled frame plus an MLP over the state; ``Normal(mu(s), exp(log_std))``
    actions and a value head. Either input may be absent (``image_key=None``, ``state_dim=0``);
    ``keypoints=K`` ends the image branch in a :class:`SpatialSoftmax` (for finding objects);
    ``state_norm`` standardises the state with a mean and scale kept with the weights (set from
    data, e.g. by behaviour cloning; 0 and 1 until then).

    >>> import numpy as np
    >>> pol = CNNGaussianPolicy(action_dim=7, state_dim=8, image_key="agentview_image")
    >>> obs = {"agentview_image": np.zeros((2, 128, 128, 3), np.uint8),
    ...        "state": np.zeros((2, 8), np.float32)}
    >>> actions, logp = pol.act(pol.encode_obs(obs))
    >>> actions.shape, logp.shape
    ((2, 7), (2,))
    """

    def __init__(
        self,
        action_dim: int,
        state_dim: int,
        *,
        image_key: str | None = "image",
        state_key: str = "state",
        image_size: int = 32,
        image_channels: int = 3,
        hidden: int = 128,
        init_log_std: float = -0.5,
        keypoints: int = 0,
        state_norm: bool = False,
    ) -> None:
        super().__init__()
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim}")
        if state_dim < 0:
            raise ValueError(f"state_dim must be >= 0, got {state_dim}")
        if image_key is None and state_dim == 0:
            raise ValueError("CNNGaussianPolicy needs an image key, a state, or both")
        if image_key is not None and image_size < 8:
            raise ValueError(f"image_size must be >= 8, got {image_size}")
        if keypoints < 0:
            raise ValueError(f"keypoints must be >= 0, got {keypoints}")
        self.action_dim = int(action_dim)
        self.state_dim = int(state_dim)
        self.image_key = image_key
        self.state_key = state_key
        self.image_size = int(image_size)
        self.image_channels = int(image_channels)
        self.hidden = int(hidden)
        self.keypoints = int(keypoints)
        self.state_norm = bool(state_norm) and state_dim > 0
        if self.state_norm:  # set from data (e.g. by behaviour cloning); saved with the weights
            self.register_buffer("state_mean", torch.zeros(state_dim))
            self.register_buffer("state_std", torch.ones(state_dim))

        features = 0
        self.cnn: nn.Module | None
        self.image_proj: nn.Module | None
        if image_key is not None and keypoints:
            self.cnn = nn.Sequential(
                nn.Conv2d(image_channels, 16, kernel_size=3, stride=1, padding=1),
                nn.ReLU(),
                nn.Conv2d(16, 32, kernel_size=3, stride=2, padding=1),
                nn.ReLU(),
                nn.Conv2d(32, keypoints, kernel_size=3, stride=1, padding=1),
                SpatialSoftmax(),
            )
            self.image_proj = nn.Sequential(nn.Linear(2 * keypoints, hidden), nn.ReLU())
            features += hidden
        elif image_key is not None:
            self.cnn = nn.Sequential(
                nn.Conv2d(image_channels, 16, kernel_size=4, stride=2, padding=1),
                nn.ReLU(),
                nn.Conv2d(16, 32, kernel_size=4, stride=2, padding=1),
                nn.ReLU(),
                nn.Conv2d(32, 32, kernel_size=3, stride=2, padding=1),
                nn.ReLU(),
                nn.Flatten(),
            )
            with torch.no_grad():
                probe = torch.zeros(1, image_channels, image_size, image_size)
                cnn_out = int(self.cnn(probe).shape[1])
            self.image_proj = nn.Sequential(nn.Linear(cnn_out, hidden), nn.ReLU())
            features += hidden
        else:
            self.cnn = None
            self.image_proj = None
        if state_dim > 0:
            self.state_mlp: nn.Module | None = nn.Sequential(
                nn.Linear(state_dim, hidden), nn.Tanh()
            )
            features += hidden
        else:
            self.state_mlp = None
        self.actor = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, action_dim)
        )
        self.critic = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        with torch.no_grad():
            last = self.actor[-1]
            assert isinstance(last, nn.Linear)
            last.weight.mul_(0.01)
            last.bias.zero_()

    @classmethod
    def from_spaces(
        cls, observation_space: gym.Space, action_space: gym.spaces.Box, **kw: object
    ) -> CNNGaussianPolicy:
        """Build from Gymnasium spaces: a ``Dict`` observation space gives its image key (dropped if
        absent) and state key, a flat ``Box`` a state-only policy."""
        from gymnasium import spaces

        if not isinstance(action_space, spaces.Box):
            raise ValueError(f"CNNGaussianPolicy needs a Box action space, got {action_space}")
        action_dim = int(np.prod(action_space.shape))
        image_key = kw.pop("image_key", "image")
        state_key = kw.pop("state_key", "state")
        if isinstance(observation_space, spaces.Dict):
            subspaces = observation_space.spaces
            if image_key is not None and image_key not in subspaces:
                image_key = None
            if image_key is not None:
                shape = subspaces[image_key].shape
                if shape is None or len(shape) != 3:
                    raise ValueError(f"observation {image_key!r}: expected (H, W, C), got {shape}")
                kw.setdefault("image_channels", int(shape[2]))
            state_dim = int(np.prod(subspaces[state_key].shape)) if state_key in subspaces else 0
        elif isinstance(observation_space, spaces.Box):
            image_key = None
            state_dim = int(np.prod(observation_space.shape))
        else:
            raise ValueError(f"unsupported observation space {observation_space}")
        return cls(action_dim, state_dim, image_key=image_key, state_key=state_key, **kw)

    def encode_obs(self, obs: Mapping[str, np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
        """Batched observation -> ``{image_key: uint8 [B, s, s, C], state_key: float32 [B, D]}``.

        A bare array is taken as the state (for ``Box`` observation spaces)."""
        if not isinstance(obs, Mapping):
            obs = {self.state_key: np.asarray(obs)}
        out: dict[str, np.ndarray] = {}
        if self.image_key is not None:
            if self.image_key not in obs:
                raise KeyError(f"observation has no image key {self.image_key!r}: {sorted(obs)}")
            img = np.asarray(obs[self.image_key])
            if img.ndim == 3:
                img = img[None]
            out[self.image_key] = downscale_images(img, self.image_size)
        if self.state_dim > 0:
            if self.state_key not in obs:
                raise KeyError(f"observation has no state key {self.state_key!r}: {sorted(obs)}")
            st = np.asarray(obs[self.state_key], dtype=np.float32)
            st = st.reshape(-1, self.state_dim) if st.ndim <= 1 else st.reshape(st.shape[0], -1)
            if st.shape[1] != self.state_dim:
                raise ValueError(
                    f"observation {self.state_key!r}: expected {self.state_dim} values, "
                    f"got {st.shape[1]}"
                )
            out[self.state_key] = st
        return out

    def features(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Shared features ``[B, F]`` of image and state."""
        parts = []
        if self.cnn is not None and self.image_proj is not None:
            img = inputs[self.image_key]  # type: ignore[index]
            img = img.to(torch.float32).permute(0, 3, 1, 2) / 255.0
            parts.append(self.image_proj(self.cnn(img)))
        if self.state_mlp is not None:
            state = inputs[self.state_key].to(torch.float32)
            if self.state_norm:
                state = (state - self.state_mean) / self.state_std
            parts.append(self.state_mlp(state))
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]

    def forward(self, inputs: dict[str, torch.Tensor]) -> tuple[Distribution, torch.Tensor]:
        feats = self.features(inputs)
        mu = self.actor(feats)
        std = self.log_std.exp().expand_as(mu)
        value = self.critic(feats).squeeze(-1)
        return Independent(Normal(mu, std), 1), value
