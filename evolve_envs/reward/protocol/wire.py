"""Wire models shared by the reward service and its clients: a pydantic model for every JSON
request and response (docs/PROTOCOLS.md); requests ignore unknown fields, responses refuse NaN.

Example:
    >>> req = PairwiseCriticRequest(task="open the drawer", image_a="...", image_b="...")
    >>> req.model_dump()["task"]
    'open the drawer'
"""

from __future__ import annotations

from typing import Literal

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
    """`POST /trajectory-critic`: critics between `frames[::skip]` (base64 JPEG/PNG), as VLAC."""

    task: str
    frames: list[str] = Field(fail_fast=True)  # fail_fast: N wrong items are one error, not N
    reference: list[str] | None = Field(default=None, fail_fast=True)
    skip: int = Field(default=5, ge=1)
    ref_num: int | None = Field(default=None, ge=0)
    batch_size: int = Field(default=8, ge=1)
    task_name: str | None = None
    use_server_reference: bool | None = None


class TrajectoryCriticResponse(_Response):
    """`value_list` starts at 0 and has one more entry than `critic_list` (VLAC's accumulation)."""

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
    reference: list[str] | None = Field(default=None, fail_fast=True)


class DoneResponse(_Response):
    """`done` decision and its probability in [0, 1]."""

    done: bool
    prob: float


class Capabilities(_Response):
    """`GET /capabilities`: the routes the backend serves (others 501) and which model answers."""

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
    """`GET /health` and `POST /healthcheck`."""

    status: Literal["ok"] = "ok"
    backend: str
    protocol_version: str = PROTOCOL_VERSION


# ------------------------------------------------------------------------ video score protocol


def sample_indices(total: int, nframes: int) -> list[int]:
    """`nframes` indices evenly spread over `range(total)`, first and last included (one: the last).

    The `/score` rule: the client samples with it before encoding, the server after decoding.
    """
    if total <= 0:
        return []
    if nframes >= total:
        return list(range(total))
    if nframes == 1:
        return [total - 1]
    return [int(round(i * (total - 1) / (nframes - 1))) for i in range(nframes)]


class ScoreRequest(_Request):
    """`POST /score`: score an episode video, given as one of `video_path` or `video_b64`."""

    task_text: str
    video_path: str | None = None
    video_b64: str | None = None
    nframes: int = Field(default=16, ge=1)
    max_pixels: int = Field(default=200704, ge=1)
    backend: str | None = None
    backend_kwargs: dict[str, object] | None = None

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
    """Body of every JSON error response (4xx/5xx); extra fields (a route's context) are kept."""

    model_config = ConfigDict(extra="allow")

    error: str
    detail: object = None


# ----------------------------------------------------------------------------- pickle protocol


class PickleScoreRequest(_Request):
    """Decoded body of `POST /pickle` (and `POST /`): one prompt per image, or flow_grpo's forms.

    >>> PickleScoreRequest(images=[b"<jpeg>", b"<jpeg>"]).prompts
    ['', '']
    """

    images: list[bytes] = Field(min_length=1, fail_fast=True)
    prompts: list[str] | None = Field(default=None, fail_fast=True)
    metadata: dict[str, object] = Field(default_factory=dict)
    meta_datas: list[object] | None = Field(default=None, fail_fast=True)
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
        """Whether the keys are one of flow_grpo's remote scorers' (its answer then has theirs)."""
        fields = self.model_fields_set
        theirs = bool({"meta_datas", "only_strict"} & fields)
        return theirs or not (self._prompts_sent or "metadata" in fields)


class PickleScoreResponse(_Response):
    """Decoded answer of `POST /pickle`: one score per image."""

    scores: list[float]
