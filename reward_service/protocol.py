"""Wire format shared by the reward service and its clients.

Pydantic models for every request and response of the three protocols (docs/PROTOCOLS.md) and a
restricted pickle codec for the pickle-scorer protocol. This module imports only the standard
library and pydantic, so clients can import it without pulling in FastAPI or a model.

Progress protocol (VLAC-compatible)::

    POST /trajectory-critic  TrajectoryCriticRequest -> TrajectoryCriticResponse
    POST /pairwise-critic    PairwiseCriticRequest   -> PairwiseCriticResponse
    POST /done               DoneRequest             -> DoneResponse
    GET  /capabilities                               -> Capabilities
    POST /healthcheck, GET /health                   -> HealthResponse

Episode video score (RLinf-compatible)::

    POST /score              ScoreRequest            -> ScoreResponse

Pickle scorer (deepgen_rl / VeRL-Omni-compatible)::

    POST /pickle (or /)      safe_pickle_dumps({"images": [...], "prompts": [...], "metadata": {}})
                             -> safe_pickle_dumps({"scores": [...]}) or {"error": str}

Every JSON error response has the shape of `ErrorResponse`.

Example:
    >>> req = PairwiseCriticRequest(task="open the drawer", image_a="...", image_b="...")
    >>> body = req.model_dump_json()
    >>> safe_pickle_loads(safe_pickle_dumps({"scores": [0.5]}))
    {'scores': [0.5]}
"""

from __future__ import annotations

import io
import pickle
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "PROTOCOL_VERSION",
    "sample_indices",
    "TrajectoryCriticRequest",
    "TrajectoryCriticResponse",
    "PairwiseCriticRequest",
    "PairwiseCriticResponse",
    "DoneRequest",
    "DoneResponse",
    "Capabilities",
    "HealthResponse",
    "ScoreRequest",
    "ScoreResponse",
    "ErrorResponse",
    "PickleScoreRequest",
    "PickleScoreResponse",
    "FaultSpec",
    "UnsafePickleError",
    "safe_pickle_loads",
    "safe_pickle_dumps",
    "to_plain",
]

PROTOCOL_VERSION = "1"


class _Request(BaseModel):
    """Requests ignore unknown fields so that newer clients work against older servers."""

    model_config = ConfigDict(extra="ignore")


class _Response(BaseModel):
    """Responses reject NaN and infinity: a non-finite score is a server bug, not a value."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


# ----------------------------------------------------------------------------- progress protocol


class TrajectoryCriticRequest(_Request):
    """`POST /trajectory-critic`: critics between consecutive sampled frames of a trajectory.

    Frames are base64-encoded JPEG or PNG images. The service samples `frames[::skip]` (as
    VLAC does: pairs `(frames[i - skip], frames[i])` for `i = skip, 2*skip, ...`), so the answer
    has `len(range(skip, len(frames), skip))` critics and one more value.
    """

    task: str
    frames: list[str]
    reference: list[str] | None = None
    skip: int = Field(default=5, ge=1)
    ref_num: int | None = Field(default=None, ge=0)
    batch_size: int = Field(default=8, ge=1)
    task_name: str | None = None
    use_server_reference: bool | None = None


class TrajectoryCriticResponse(_Response):
    """`value_list` starts at 0 and has one more entry than `critic_list`.

    `value_list[k] = value_list[k-1] + (100 - value_list[k-1]) * critic_list[k-1] / 100`
    (VLAC's `critic_to_value_simple`; not clamped by the service).
    """

    value_list: list[float]
    critic_list: list[float]

    @model_validator(mode="after")
    def _lengths_match(self) -> TrajectoryCriticResponse:
        if len(self.value_list) != len(self.critic_list) + 1:
            raise ValueError(
                f"value_list must have len(critic_list) + 1 entries, got "
                f"{len(self.value_list)} values for {len(self.critic_list)} critics"
            )
        return self


class PairwiseCriticRequest(_Request):
    """`POST /pairwise-critic`: how much closer `image_b` is to completing `task` than `image_a`."""

    task: str
    image_a: str
    image_b: str


class PairwiseCriticResponse(_Response):
    """`critic` in [-100, 100]."""

    critic: float


class DoneRequest(_Request):
    """`POST /done`: is the task complete in `curr_frame`?"""

    task: str
    first_frame: str
    prev_frame: str
    curr_frame: str
    reference: list[str] | None = None


class DoneResponse(_Response):
    """`done` decision and its probability in [0, 1]."""

    done: bool
    prob: float


class Capabilities(_Response):
    """`GET /capabilities`: which routes the backend can serve (others answer 501).

    `progress` (`/trajectory-critic`) is always true; `image_score` covers the pickle scorer.
    """

    backend: str
    progress: bool = True
    pairwise: bool = False
    done: bool = False
    video: bool = False
    image_score: bool = False


class HealthResponse(_Response):
    """`GET /health` and `POST /healthcheck`."""

    status: Literal["ok"] = "ok"
    backend: str
    protocol_version: str = PROTOCOL_VERSION


# ------------------------------------------------------------------------ video score protocol


def sample_indices(total: int, nframes: int) -> list[int]:
    """The `/score` sampling rule: `nframes` indices evenly spread over `range(total)`.

    First and last frame included (one frame: the last); all of them when `nframes >= total`.
    The client samples with it before encoding, the server again after decoding.
    """
    if total <= 0:
        return []
    if nframes >= total:
        return list(range(total))
    if nframes == 1:
        return [total - 1]
    return [int(round(i * (total - 1) / (nframes - 1))) for i in range(nframes)]


class ScoreRequest(_Request):
    """`POST /score`: score an episode video for `task_text`.

    Give exactly one of `video_path` (a file the server can read: shared filesystem) or
    `video_b64` (the encoded video file, e.g. MP4, base64). The server samples `nframes`
    frames uniformly (all if fewer) and resizes each to at most `max_pixels` pixels.
    """

    task_text: str
    video_path: str | None = None
    video_b64: str | None = None
    nframes: int = Field(default=16, ge=1)
    max_pixels: int = Field(default=200704, ge=1)
    backend: str | None = None
    backend_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_video_source(self) -> ScoreRequest:
        if (self.video_path is None) == (self.video_b64 is None):
            raise ValueError("give exactly one of video_path or video_b64")
        return self


class ScoreResponse(_Response):
    """Episode score (in [0, 1] for the bundled backends) and the model's raw answer if any."""

    score: float
    raw_text: str | None = None


# ------------------------------------------------------------------------------ errors, faults


class ErrorResponse(BaseModel):
    """Body of every JSON error response (4xx/5xx)."""

    model_config = ConfigDict(extra="allow")

    error: str
    detail: Any | None = None


class FaultSpec(_Request):
    """Body of `POST /admin/faults` (only when the server runs with fault injection enabled).

    See `reward_service.faults` for the meaning of each mode.
    """

    mode: Literal["status", "delay", "invalid_json", "wrong_length", "nan", "inf", "reset"]
    status: int = Field(default=503, ge=100, le=599)
    delay_s: float = Field(default=2.0, ge=0.0, le=600.0)
    count: int | None = Field(default=None, ge=1)
    routes: list[str] | None = None


# ----------------------------------------------------------------------------- pickle protocol


class PickleScoreRequest(_Request):
    """Decoded body of `POST /pickle` (and `POST /`): one prompt per image (JPEG/PNG bytes).

    Also accepts flow_grpo's remote-scorer variant: `{"images"}` alone (empty prompts),
    `{"images", "prompts"}`, or `{"images", "meta_datas", "only_strict"}`. Numpy arrays from the
    pickle arrive here already turned into lists (`to_plain`).
    """

    images: list[bytes] = Field(min_length=1)
    prompts: list[str] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    meta_datas: list[Any] | None = None
    only_strict: bool | None = None

    @model_validator(mode="after")
    def _same_length(self) -> PickleScoreRequest:
        if self.prompts is None:
            self.prompts = [""] * len(self.images)
        if len(self.images) != len(self.prompts):
            raise ValueError(
                f"images and prompts must have the same length, got "
                f"{len(self.images)} images and {len(self.prompts)} prompts"
            )
        return self

    @property
    def flow_grpo_variant(self) -> bool:
        """True when the request used flow_grpo's keys (its answer carries their keys too)."""
        return bool({"meta_datas", "only_strict"} & self.model_fields_set)


class PickleScoreResponse(_Response):
    """Decoded answer of `POST /pickle`: one score per image."""

    scores: list[float]


class UnsafePickleError(ValueError):
    """A pickle refers to a global (class, function) or holds a type outside the allowed set."""


_ALLOWED_SCALARS = (bytes, str, int, float, bool, type(None))
_MAX_DEPTH = 64
# numpy dtype kinds a pickle may carry: bool, signed/unsigned int, float, complex, str, bytes.
_NUMPY_KINDS = frozenset("biufcUS")
_ALLOWED_TEXT = (
    "bytes, str, int, float, bool, None, list, tuple, dict and numpy scalars/arrays of "
    "numeric, bool or str dtype"
)


def _safe_dtype(dtype: Any) -> Any:
    import numpy as np

    dtype = np.dtype(dtype)
    if dtype.kind not in _NUMPY_KINDS or dtype.hasobject or dtype.fields is not None:
        raise UnsafePickleError(f"pickle holds a numpy {dtype!r} value; {_ALLOWED_TEXT} only")
    return dtype


class _NDArrayMarker:
    """Stands in for `numpy.ndarray` while unpickling, so it can only be used to rebuild arrays."""


def _np_dtype(spec: Any, align: Any = False, copy: Any = False) -> Any:
    import numpy as np

    if not isinstance(spec, str):
        raise UnsafePickleError("numpy dtype must be given by its name")
    return _safe_dtype(np.dtype(spec))


def _np_reconstruct(cls: Any, shape: Any, typecode: Any) -> Any:
    import numpy as np

    if cls is not _NDArrayMarker:
        raise UnsafePickleError("numpy array reconstruction for a type other than ndarray")
    return np.ndarray((0,), dtype=np.uint8)


def _np_scalar(dtype: Any, data: Any = None) -> Any:
    import numpy as np

    dtype = _safe_dtype(dtype)
    if not isinstance(data, bytes) or len(data) != dtype.itemsize:
        raise UnsafePickleError("malformed numpy scalar")
    return np.frombuffer(data, dtype=dtype)[0]


# The numpy globals a pickled numpy scalar or array names, mapped to checked stand-ins.
_NUMPY_GLOBALS: dict[tuple[str, str], Any] = {}
for _module in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _NUMPY_GLOBALS[(_module, "_reconstruct")] = _np_reconstruct
    _NUMPY_GLOBALS[(_module, "scalar")] = _np_scalar
_NUMPY_GLOBALS[("numpy", "ndarray")] = _NDArrayMarker
_NUMPY_GLOBALS[("numpy", "dtype")] = _np_dtype


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global except checked stand-ins for numpy data.

    A pickled numpy array names `numpy.ndarray`, `numpy.dtype` and
    `numpy._core.multiarray._reconstruct`; these resolve to functions of this module that
    build only arrays and scalars of the allowed dtypes (never object dtype). Any other global
    (e.g. `os.system`) raises before it is imported.
    """

    def find_class(self, module: str, name: str) -> Any:
        stand_in = _NUMPY_GLOBALS.get((module, name))
        if stand_in is not None:
            return stand_in
        raise UnsafePickleError(
            f"pickle refers to the global {module}.{name}; only {_ALLOWED_TEXT} are accepted"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("pickle uses persistent ids, which are not accepted")


def _is_safe_numpy(item: Any) -> bool:
    """True for numpy arrays and scalars of an allowed dtype (numpy imported only if loaded)."""
    import sys

    np = sys.modules.get("numpy")
    if np is None or not isinstance(item, np.ndarray | np.generic):
        return False
    if type(item) is not np.ndarray and not isinstance(item, np.generic):
        return False  # ndarray subclasses (np.matrix, masked arrays) are not plain data
    try:
        _safe_dtype(item.dtype)
    except UnsafePickleError:
        return False
    return True


def _check_plain(obj: Any) -> None:
    """Raise UnsafePickleError unless `obj` holds only the allowed plain types.

    Containers already seen are skipped (by identity), so shared references and cycles that a
    pickle can build with its memo cost linear time.
    """
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind in _ALLOWED_SCALARS:
            continue
        if kind not in (list, tuple, dict):
            if _is_safe_numpy(item):
                continue
            raise UnsafePickleError(
                f"pickle holds a {kind.__name__}"
                + (f" of dtype {item.dtype}" if hasattr(item, "dtype") else "")
                + f"; only {_ALLOWED_TEXT} are accepted"
            )
        if id(item) in seen:
            continue
        seen.add(id(item))
        if depth >= _MAX_DEPTH:
            raise UnsafePickleError(f"pickle is nested deeper than {_MAX_DEPTH} levels")
        if kind is dict:
            for key, value in item.items():
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        else:
            stack.extend((child, depth + 1) for child in item)


def to_plain(obj: Any) -> Any:
    """`obj` with numpy scalars and arrays turned into Python values and (nested) lists.

    Example:
        >>> import numpy as np
        >>> to_plain({"scores": np.array([0.5, 1.0], dtype=np.float32), "n": np.int64(2)})
        {'scores': [0.5, 1.0], 'n': 2}
    """
    if isinstance(obj, dict):
        return {to_plain(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_plain(v) for v in obj)
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):
        return obj.tolist()
    return obj


def safe_pickle_loads(data: bytes) -> Any:
    """Unpickle `data` resolving no global but numpy's; only plain data types come back.

    Allowed: bytes, str, int, float, bool, None, list, tuple, dict (nested), and numpy scalars
    and arrays of bool, integer, float, complex, str or bytes dtype (rebuilt through checked
    stand-ins, never object dtype). A pickle that names any other class or function (e.g. a
    crafted `os.system` call) raises `UnsafePickleError` before anything is imported or called.
    Malformed data also raises `UnsafePickleError`. `to_plain` turns numpy values into lists.

    Example:
        >>> safe_pickle_loads(pickle.dumps({"scores": [1.0, 0.5]}))
        {'scores': [1.0, 0.5]}
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise UnsafePickleError(f"expected bytes, got {type(data).__name__}")
    try:
        obj = _NoGlobalsUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError:
        raise
    except RecursionError as exc:
        raise UnsafePickleError("pickle is nested too deeply") from exc
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a malformed payload
        raise UnsafePickleError(f"malformed pickle: {type(exc).__name__}: {exc}") from exc
    _check_plain(obj)
    return obj


def safe_pickle_dumps(obj: Any) -> bytes:
    """Pickle plain data (the same types `safe_pickle_loads` accepts), protocol 4.

    Raises `UnsafePickleError` if `obj` holds anything else (e.g. an object array), so the other
    side can always read what this side writes.
    """
    _check_plain(obj)
    return pickle.dumps(obj, protocol=4)
