"""A saved policy as one file anyone may open: safetensors weights and a JSON header, no pickle.

>>> import tempfile, torch
>>> from gymnasium import spaces
>>> box = spaces.Box(-1.0, 1.0, (2,), np.float32)
>>> path = save_policy_file(Path(tempfile.mkdtemp()) / "p.safetensors", {"w": torch.ones(2)},
...                         {"algo": "grpo"}, box, box)
>>> saved = read_policy_file(path)
>>> saved.info["algo"], saved.action_space, read_policy_info(path)["format"]
('grpo', Box(-1.0, 1.0, (2,), float32), 1)
"""

# A run writes ``best.safetensors`` (its best held-out evaluation) and ``policy.safetensors`` (the
# last checkpoint's policy). The weights are the state dict as safetensors stores tensors (reading
# them runs no code); the safetensors metadata holds one JSON document under HEADER_KEY: the
# training config (``TrainConfig.stored()``, never the token), the algorithm, the observation and
# action spaces (space_to_json), the counters and, for the best policy, its evaluation. So
# ``evolve_envs.load_policy`` rebuilds the policy without building its env.

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym
    import torch

__all__ = [
    "BEST_POLICY",
    "FORMAT",
    "HEADER_KEY",
    "LAST_POLICY",
    "PolicyFile",
    "load_initial_weights",
    "read_policy_file",
    "read_policy_info",
    "save_policy_file",
    "saved_source",
    "space_from_json",
    "space_to_json",
]

#: The best policy by held-out success, in the run directory.
BEST_POLICY = "best.safetensors"
#: The policy of the run's last checkpoint, in the run directory.
LAST_POLICY = "policy.safetensors"
#: The safetensors metadata key that holds the JSON header.
HEADER_KEY = "evolve_envs.policy"
#: The header's ``format``: what this version writes and reads.
FORMAT = 1


def _number(x: float | int) -> float | int | str:
    # a bound as JSON: a number, or "inf" / "-inf" / "nan" (strict JSON has none)
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def _bound(values: np.ndarray) -> object:
    # a Box bound: one number when every entry is the same, else nested lists
    flat = values.reshape(-1)
    if flat.size and bool(np.all(flat == flat[0])):
        return _number(flat[0].item())
    return _nested(values.tolist())


def _nested(values: object) -> object:
    if isinstance(values, list):
        return [_nested(v) for v in values]
    return _number(values)  # type: ignore[arg-type]


def _unbound(value: object, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    def num(v: object) -> object:
        if isinstance(v, list):
            return [num(x) for x in v]
        return float(v) if isinstance(v, str) else v

    arr = np.asarray(num(value), dtype=np.float64 if dtype.kind == "f" else None)
    return np.broadcast_to(arr, shape).astype(dtype)


def space_to_json(space: gym.Space) -> dict[str, Any]:
    """A space as JSON: Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple of them.

    >>> from gymnasium import spaces
    >>> space_to_json(spaces.Box(0, 255, (4, 4, 3), np.uint8))
    {'type': 'Box', 'shape': [4, 4, 3], 'dtype': 'uint8', 'low': 0, 'high': 255}
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_json(v) for k, v in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(v) for v in space.spaces]}
    raise ValueError(
        f"cannot describe {space} in a policy file (Box, Discrete, MultiDiscrete, MultiBinary, "
        "Dict and Tuple of them)"
    )


def space_from_json(data: Mapping[str, Any]) -> gym.Space:
    """The space :func:`space_to_json` described.

    >>> space_from_json({"type": "Discrete", "n": 3, "start": 0})
    Discrete(3)
    """
    from gymnasium import spaces

    kind = data.get("type")
    if kind == "Box":
        shape = tuple(int(n) for n in data["shape"])
        dtype = np.dtype(str(data["dtype"]))
        low = _unbound(data["low"], shape, dtype)
        high = _unbound(data["high"], shape, dtype)
        return spaces.Box(low, high, shape, dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(data["nvec"], dtype=np.dtype(str(data["dtype"])))
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "Dict":
        return spaces.Dict({str(k): space_from_json(v) for k, v in data["spaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple([space_from_json(v) for v in data["spaces"]])
    raise ValueError(f"a policy file names an unknown space type {kind!r}")


@dataclass(frozen=True)
class PolicyFile:
    """A policy file as :func:`read_policy_file` found it (see the module's example).

    >>> PolicyFile(Path("b.safetensors"), {}, {"counters": {"updates": 3}}, None, None).counters
    {'updates': 3}
    """

    path: Path
    state_dict: dict[str, torch.Tensor]  # the policy's weights
    info: dict[str, Any]  # the JSON header: config, algo, counters, eval, the spaces' JSON
    observation_space: gym.Space
    action_space: gym.Space

    @property
    def counters(self) -> dict[str, int]:
        # the training counters when the policy was saved
        return {str(k): int(v) for k, v in (self.info.get("counters") or {}).items()}


def save_policy_file(
    path: str | os.PathLike[str],
    state_dict: Mapping[str, torch.Tensor],
    info: Mapping[str, Any],
    observation_space: gym.Space,
    action_space: gym.Space,
) -> Path:
    """Write ``state_dict`` and the JSON ``info`` (with the spaces) atomically; returns the path.

    A tmp file, fsync, rename: a crash leaves the previous file whole (the module's example).
    """
    import torch
    from safetensors.torch import save

    tensors = {str(k): v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
    bad = [k for k, v in tensors.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise TypeError(f"a policy file holds tensors only, not {bad[0]!r}")
    header = {
        **info,
        "format": FORMAT,
        "observation_space": space_to_json(observation_space),
        "action_space": space_to_json(action_space),
    }
    data = save(tensors, metadata={HEADER_KEY: json.dumps(header)})
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out)
    return out


def read_policy_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON header of a policy file, without its weights (the module's example)."""
    from safetensors import safe_open

    try:
        with safe_open(os.fspath(path), framework="pt") as fh:
            meta = fh.metadata() or {}
    except Exception as exc:  # safetensors raises its own error type for a bad header
        raise ValueError(f"{path}: not a policy file (safetensors: {exc})") from None
    if HEADER_KEY not in meta:
        raise ValueError(f"{path}: a safetensors file without an evolve-envs policy header")
    info = json.loads(meta[HEADER_KEY])
    if int(info.get("format", 0)) > FORMAT:
        raise ValueError(
            f"{path}: policy file format {info.get('format')}, newer than this evolve-envs "
            f"reads ({FORMAT}); upgrade evolve-envs"
        )
    return info


def read_policy_file(path: str | os.PathLike[str]) -> PolicyFile:
    """A policy file's weights, header and spaces; no code runs (the module's example)."""
    from safetensors.torch import load_file

    info = read_policy_info(path)
    state = load_file(os.fspath(path), device="cpu")
    obs = space_from_json(info["observation_space"])
    act = space_from_json(info["action_space"])
    return PolicyFile(Path(path), state, info, obs, act)


def load_initial_weights(
    policy: torch.nn.Module, path: str | os.PathLike[str], spaces: Mapping[str, gym.Space]
) -> None:
    """Load a policy file's weights into a new run's ``policy`` (``policy.init_from``).

    The file's observation and action spaces must be the run's (``spaces``:
    ``observation_space``, ``action_space``) and its weights the policy's, key for key and shape
    for shape; otherwise a ``ConfigError`` says what differs. No code runs (safetensors).
    """
    from evolve_envs.progress.config_error import ConfigError

    try:
        saved = read_policy_file(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"policy.init_from: {exc}") from None
    for name, space in (("observation", saved.observation_space), ("action", saved.action_space)):
        if space != spaces[f"{name}_space"]:
            raise ConfigError(
                f"policy.init_from: {path} was saved for the {name} space {space}, this run's "
                f"env has {spaces[f'{name}_space']}"
            )
    own = policy.state_dict()
    differ = sorted(
        set(own) ^ set(saved.state_dict)
        | {k for k in own if k in saved.state_dict and own[k].shape != saved.state_dict[k].shape}
    )
    if differ:
        raise ConfigError(
            f"policy.init_from: {path} holds other weights than this run's policy block builds "
            f"(first differing: {', '.join(differ[:3])}); use the policy block it was saved with"
        )
    policy.load_state_dict(saved.state_dict)


def saved_source(source: str | os.PathLike[str], *, best: bool = False) -> Path:
    """The file a run directory's policy is read from (a file is itself).

    >>> saved_source("runs/absent", best=True).name
    'best.safetensors'
    """
    # best.safetensors (best) or policy.safetensors; an older run's best.pt / checkpoint.pt when
    # only those are there
    src = Path(source)
    if src.is_file() or src.suffix in (".safetensors", ".pt"):
        return src
    new, old = (BEST_POLICY, "best.pt") if best else (LAST_POLICY, "checkpoint.pt")
    return src / old if not (src / new).is_file() and (src / old).is_file() else src / new
