"""The server's limits in one place, :class:`ServiceLimits`: default, meaning, flag and environment
variable (``EVOLVE_REWARD_<FIELD>``) of each; flags, `create_app`, Ray Serve and the README's table
all read it.

Example:
    >>> ServiceLimits().max_frames, DEFAULT_LIMITS["max_frames"]
    (1024, 1024)
    >>> ServiceLimits.from_env({"EVOLVE_REWARD_MAX_FRAMES": "256"}).max_frames
    256
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ServiceLimits",
    "DEFAULT_LIMITS",
    "ENV_PREFIX",
    "PIXELS_PER_IMAGE_TOKEN",
    "APP_LIMITS",
    "CONNECTION_LIMITS",
    "CLIENT_THREADS",
    "add_limit_arguments",
    "admission_for",
    "limits_from_args",
    "markdown_table",
]

ENV_PREFIX = "EVOLVE_REWARD_"
MIB = 2**20
#: Calls one env's reward client runs at once at most (its thread pool): an env never has more
#: requests in flight than this.
CLIENT_THREADS = 8
#: Pixels one image token of a VLM covers (Qwen2-VL / Qwen2.5-VL: 14x14 patches merged 2x2).
PIXELS_PER_IMAGE_TOKEN = 28 * 28


def _limit(default: float, what: str, *, flag: str | None = None, scale: float = 1, unit: str = ""):
    """A limit field: ``what`` it bounds (and how the server answers past it), its flag (default
    ``--<name>``) and the flag's unit (the flag's value times ``scale`` is the field's)."""
    return Field(
        default,
        ge=1,
        description=what,
        json_schema_extra={
            "flag": flag,
            "scale": scale,
            "unit": unit,
        },
    )


class ServiceLimits(BaseModel):
    """Every limit of the reward service (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_body_bytes: int = _limit(
        64 * MIB, "request body (413)", flag="--max-body-mb", scale=MIB, unit="MiB"
    )
    max_inflight_body_bytes: int = _limit(
        1024 * MIB,
        "request bodies held at once, summed over the requests in flight (from `Content-Length`;"
        " then 503 with `Retry-After`; a request alone always fits)",
        flag="--max-inflight-body-mb",
        scale=MIB,
        unit="MiB",
    )
    max_body_nodes: int = _limit(
        100_000,
        "decoded body (pickle or JSON): values, keys and containers, shared references counted "
        "each time they are reached (413 naming the field; a field that refers to itself 422); "
        "its strings' and bytes' characters count against the body limit likewise",
    )
    max_body_depth: int = _limit(64, "decoded body: nesting levels (413)")
    max_frames: int = _limit(1024, "frames / reference frames / pickle images per request (413)")
    max_image_side: int = _limit(4096, "image or video frame side, pixels (413)")
    max_request_pixels: int = _limit(
        1024 * 512 * 512,
        "decoded pixels per request, summed over its images (from the headers, before decoding; "
        "JPEGs at their DCT-reduced size) (413)",
        flag="--max-request-mpix",
        scale=1e6,
        unit="M",
    )
    max_image_decode_bytes: int = _limit(
        32 * MIB,
        "memory one image's decoding takes, from its header (PNG IHDR size and mode, JPEG SOF; "
        "a `/score` frame as width x height x 3); a 4,096² RGB PNG needs 65 MiB (413)",
        flag="--max-image-decode-mb",
        scale=MIB,
        unit="MiB",
    )
    max_video_frames: int = _limit(10_000, "`/score`: frames in the video (413)")
    max_nframes: int = _limit(128, "`/score`: frames a request may sample (`nframes`) (422)")
    max_video_pixels: int = _limit(
        4 * 448 * 448, "`/score`: pixels per sampled frame a request may ask for (`max_pixels`)"
    )
    max_video_decode_pixels: int = _limit(
        2**31,
        "`/score` decoding work: frames x width x height of the whole video (e.g. 2,300 frames "
        "of 720p) (413)",
        flag="--max-video-decode-mpix",
        scale=1e6,
        unit="M",
    )
    max_image_tokens: int = _limit(
        32_768,
        "model work per call: image tokens one `/score` request may ask for, `nframes` x "
        "`max_pixels` / 784 (a token per 28x28 pixels, as Qwen2.5-VL counts them); e.g. 128 "
        "frames at 448x448 (413)",
    )
    max_new_tokens: int = _limit(
        1024, "tokens a caller may ask a model to generate (`/score` `max_new_tokens`) (422)"
    )
    max_form_parts: int = _limit(
        512, "parts of a `multipart/form-data` body (`/evaluate_batch_npy`) (413)"
    )
    max_text_chars: int = _limit(8192, "task or prompt length, characters (valid Unicode) (422)")
    header_timeout_s: float = _limit(
        10,
        "seconds for a request's headers to arrive, from its first byte or the connection's "
        "opening (then 408 and close)",
    )
    read_timeout_s: float = _limit(
        60, "seconds for a whole request (headers and body) to arrive (then 408 and close)"
    )
    max_connections: int = _limit(
        512,
        "open connections, and never more than `RLIMIT_NOFILE` minus the headroom; at the cap a "
        "connection without a request in progress makes room (the oldest with unfinished "
        "headers, else the one idle longest); only when all are busy is a new one refused (503)",
    )
    connection_fd_headroom: int = _limit(
        64, "file descriptors kept free of connections for the process itself"
    )
    max_concurrent_requests: int = _limit(
        256,
        "requests handled at once; more get 503 with `Retry-After` (`/health`, `/healthcheck` and"
        " `/metrics` take no place)",
    )

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> ServiceLimits:
        """The defaults, with ``EVOLVE_REWARD_<FIELD>`` variables applied, then ``overrides``."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name in cls.model_fields:
            text = environ.get(ENV_PREFIX + name.upper())
            if text is not None and text.strip():
                values[name] = text.strip()
        return cls(**{**values, **overrides})

    def app_kwargs(self) -> dict[str, object]:
        """The limits ``create_app`` takes (all but the connection layer's)."""
        return {k: v for k, v in self.model_dump().items() if k in APP_LIMITS}


#: The defaults, by field name (what the request checks and ``create_app`` default to).
DEFAULT_LIMITS: dict[str, object] = ServiceLimits().model_dump()
#: The limits the uvicorn connection layer enforces (``evolve-reward-server`` only).
CONNECTION_LIMITS = (
    "header_timeout_s",
    "read_timeout_s",
    "max_connections",
    "connection_fd_headroom",
)
#: The limits the app enforces (``create_app`` and the Ray Serve application take them).
APP_LIMITS = tuple(n for n in ServiceLimits.model_fields if n not in CONNECTION_LIMITS)


def _flag(name: str) -> tuple[str, float, str]:
    extra = ServiceLimits.model_fields[name].json_schema_extra or {}
    assert isinstance(extra, dict)
    flag = extra.get("flag") or "--" + name.replace("_", "-")
    return str(flag), float(extra.get("scale") or 1), str(extra.get("unit") or "")


def _shown(value: float, scale: float) -> str:
    shown = value / scale
    return f"{int(shown):,}" if shown == int(shown) else f"{shown:,.6g}"


def add_limit_arguments(parser: argparse.ArgumentParser, defaults: ServiceLimits) -> None:
    """One flag per limit, defaulting to ``defaults`` (the environment's values)."""
    group = parser.add_argument_group(
        "limits", f"each also settable as {ENV_PREFIX}<NAME> in the field's unit"
    )
    for name, field in ServiceLimits.model_fields.items():
        flag, scale, unit = _flag(name)
        value = getattr(defaults, name)
        kind = float if scale != 1 or field.annotation is float else int
        group.add_argument(
            flag,
            dest=name,
            type=kind,
            default=value / scale if scale != 1 else value,
            metavar=unit or "N",
            help=f"{field.description} (default {_shown(value, scale)}{' ' + unit if unit else ''}"
            f"; ${ENV_PREFIX}{name.upper()})",
        )


def limits_from_args(args: argparse.Namespace) -> ServiceLimits:
    """The :class:`ServiceLimits` that :func:`add_limit_arguments`' flags were given."""
    values = {}
    for name in ServiceLimits.model_fields:
        _, scale, _ = _flag(name)
        raw = getattr(args, name)
        values[name] = raw * scale if scale != 1 else raw
    kinds = {n: f.annotation for n, f in ServiceLimits.model_fields.items()}
    return ServiceLimits(**{n: int(v) if kinds[n] is int else v for n, v in values.items()})


def markdown_table() -> str:
    """The docs table of the limits: what each bounds, its default, its flag and variable."""
    rows = ["| limit | default | flag | environment |", "|---|---|---|---|"]
    for name, field in ServiceLimits.model_fields.items():
        flag, scale, unit = _flag(name)
        default = _shown(field.default, scale) + (f" {unit}" if unit else "")
        env = f"{ENV_PREFIX}{name.upper()}"
        rows.append(f"| {field.description} | {default} | `{flag}` | `{env}` |")
    return "\n".join(rows) + "\n"


def admission_for(envs: int, services: int = 1) -> int:
    """The admission limit (``--max-concurrent-requests``) each of ``services`` services needs so
    that ``envs`` envs never get a 503 for being too many: its share of every request they can
    have in flight at once (``CLIENT_THREADS`` each), and never below the default
    (docs/sizing.md, "Backpressure: more envs than the service admits").

    Example:
        >>> admission_for(4), admission_for(48), admission_for(96, services=2)
        (256, 384, 384)
    """
    default = int(DEFAULT_LIMITS["max_concurrent_requests"])
    share = -(-CLIENT_THREADS * max(1, int(envs)) // max(1, int(services)))
    return max(default, share)
