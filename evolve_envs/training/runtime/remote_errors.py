"""Remote errors in one line: what a Ray actor or task raised, without Ray's remote traceback."""

from __future__ import annotations

import re

__all__ = ["remote_error"]

_EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception)): (.+)$")


def remote_error(exc: BaseException) -> str:
    """``Name: message`` of the exception a Ray actor or task raised, without Ray's remote
    traceback.

    Example:
        >>> lines = ["The actor died ...", "Traceback ...", "pkg.ServiceUnavailableError: down"]
        >>> remote_error(RuntimeError(chr(10).join(lines)))
        'ServiceUnavailableError: down'
    """
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        return remote_error(cause)
    text = str(exc)
    matches = [m for line in text.splitlines() if (m := _EXCEPTION_LINE.match(line))]
    if matches:
        name, message = matches[-1].groups()
        return f"{name}: {message.strip()}"
    return f"{type(exc).__name__}: {text.strip().splitlines()[0] if text.strip() else ''}"
