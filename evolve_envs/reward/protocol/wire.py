"""Wire models shared by the reward service and its clients.

Pydantic models for every request and response of the three protocols (docs/PROTOCOLS.md); the
pickle scorer's restricted codec is :mod:`evolve_envs.reward.protocol.pickle_codec`. This package
imports only the standard library, NumPy and pydantic, so clients import it without FastAPI or a
model.

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
    >>> req.model_dump()["task"]
    'open the drawer'
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

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

    >>> req = TrajectoryCriticRequest(task="open the drawer", frames=["..."] * 11, skip=5,
    ...                               added_later="ignored")  # unknown fields are ignored
    >>> len(range(req.skip, len(req.frames), req.skip)), req.batch_size
    (2, 8)
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

    >>> TrajectoryCriticResponse(value_list=[0.0, 40.0, 70.0], critic_list=[40.0, 50.0]).value_list
    [0.0, 40.0, 70.0]
    >>> from pydantic import ValidationError
    >>> try:
    ...     TrajectoryCriticResponse(value_list=[0.0], critic_list=[40.0])
    ... except ValidationError as exc:
    ...     print(exc.errors()[0]["msg"])
    Value error, value_list must have len(critic_list) + 1 entries, got 1 values for 1 critics
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
    """`POST /pairwise-critic`: how much closer `image_b` is to completing `task` than `image_a`.
    >>> PairwiseCriticRequest(task="open the drawer", image_a="...", image_b="...").task
    'open the drawer'
    """

    task: str
    image_a: str
    image_b: str


class PairwiseCriticResponse(_Response):
    """`critic` in [-100, 100].
    >>> PairwiseCriticResponse.model_validate_json('{"critic": 12.5}').critic
    12.5
    """

    critic: float


class DoneRequest(_Request):
    """`POST /done`: is the task complete in `curr_frame`?
    >>> DoneRequest(task="open the drawer", first_frame="...", prev_frame="...",
    ...             curr_frame="...").reference is None
    True
    """

    task: str
    first_frame: str
    prev_frame: str
    curr_frame: str
    reference: list[str] | None = None


class DoneResponse(_Response):
    """`done` decision and its probability in [0, 1].
    >>> DoneResponse(done=True, prob=0.97).model_dump()
    {'done': True, 'prob': 0.97}
    """

    done: bool
    prob: float


class Capabilities(_Response):
    """`GET /capabilities`: which routes the backend can serve (others answer 501).

    `progress` (`/trajectory-critic`) is always true; `image_score` covers the pickle scorer.
    `model_id`, `model_revision` and `config_hash` say which model answers (None if unknown).

    >>> caps = Capabilities(backend="mock", pairwise=True)
    >>> caps.progress, caps.pairwise, caps.done
    (True, True, False)
    """

    backend: str
    progress: bool = True
    pairwise: bool = False
    done: bool = False
    video: bool = False
    image_score: bool = False
    #: who answers (all optional: servers before these fields parse with None):
    #: the model's id (checkpoint name or directory), its revision or weight fingerprint, and a
    #: hash of the backend's configuration (name and constructor arguments)
    model_id: str | None = None
    model_revision: str | None = None
    config_hash: str | None = None


class HealthResponse(_Response):
    """`GET /health` and `POST /healthcheck`.
    >>> HealthResponse(backend="mock").model_dump_json()
    '{"status":"ok","backend":"mock","protocol_version":"1"}'
    """

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

    >>> ScoreRequest(task_text="stack the blocks", video_path="/shared/episode_3.mp4").nframes
    16
    >>> from pydantic import ValidationError
    >>> try:
    ...     ScoreRequest(task_text="stack the blocks")  # no video
    ... except ValidationError as exc:
    ...     print(exc.errors()[0]["msg"])
    Value error, give exactly one of video_path or video_b64
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
    """Episode score (in [0, 1] for the bundled backends) and the model's raw answer if any.
    >>> ScoreResponse.model_validate({"score": 0.8}).raw_text is None
    True
    """

    score: float
    raw_text: str | None = None


# ------------------------------------------------------------------------------ errors, faults


class ErrorResponse(BaseModel):
    """Body of every JSON error response (4xx/5xx).
    Extra fields are kept (a route may add its own context).

    >>> ErrorResponse(error="bad_request", detail="frames: empty", route="/done").model_dump()
    {'error': 'bad_request', 'detail': 'frames: empty', 'route': '/done'}
    """

    model_config = ConfigDict(extra="allow")

    error: str
    detail: Any | None = None


# ----------------------------------------------------------------------------- pickle protocol


class PickleScoreRequest(_Request):
    """Decoded body of `POST /pickle` (and `POST /`): one prompt per image (JPEG/PNG bytes).

    Also accepts flow_grpo's remote-scorer variants: `{"images"}` alone (empty prompts; its DeQA
    scorer), `{"images", "prompts"}` (prompts a NumPy str array; its UnifiedReward scorer), or
    `{"images", "meta_datas", "only_strict"}` (its GenEval scorer). Numpy arrays from the pickle
    arrive here already turned into lists (`to_plain`).

    >>> req = PickleScoreRequest(images=[b"<jpeg>", b"<jpeg>"])
    >>> req.prompts, req.flow_grpo_variant
    (['', ''], True)
    >>> PickleScoreRequest(images=[b"<jpeg>"], meta_datas=[{}], only_strict=True).flow_grpo_variant
    True
    >>> PickleScoreRequest(images=[b"<jpeg>"], prompts=["p"]).flow_grpo_variant
    False
    """

    images: list[bytes] = Field(min_length=1)
    prompts: list[str] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    meta_datas: list[Any] | None = None
    only_strict: bool | None = None

    _prompts_sent: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def _same_length(self) -> PickleScoreRequest:
        self._prompts_sent = self.prompts is not None
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
        """True when the request's keys are those of one of flow_grpo's remote scorers (its
        answer then carries their keys too): `meta_datas` / `only_strict`, or `images` alone.
        (Their prompts arrive as a NumPy array, which the route tells from a list before
        `to_plain`.)"""
        fields = self.model_fields_set
        theirs = bool({"meta_datas", "only_strict"} & fields)
        return theirs or not (self._prompts_sent or "metadata" in fields)


class PickleScoreResponse(_Response):
    """Decoded answer of `POST /pickle`: one score per image.
    >>> PickleScoreResponse(scores=[0.5, 1]).scores
    [0.5, 1.0]
    """

    scores: list[float]
