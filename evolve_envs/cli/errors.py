"""Expected failures of the command-line tools: one line naming the cause and the fix, and an
exit status (:class:`ExitStatus`); anything else keeps its traceback (``--debug`` shows it for
expected ones too).

Example:
    >>> def fails() -> int:
    ...     raise ValueError("episodes must be an int >= 1, got 0")
    >>> import contextlib, io
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     status = run_command("evolve-envs rollout", fails, debug=False)
    >>> int(status), err.getvalue().strip()
    (2, 'evolve-envs rollout: error: episodes must be an int >= 1, got 0')
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

__all__ = [
    "DEBUG_ENV",
    "ContextFormatter",
    "configure_cli_logging",
    "CliError",
    "ExitStatus",
    "debug_requested",
    "describe_failure",
    "library_output_to",
    "one_line",
    "run_command",
]

#: Set to 1 (or true/yes/on) to see the traceback of expected failures, as ``--debug`` does.
DEBUG_ENV = "EVOLVE_ENVS_DEBUG"


class ExitStatus(enum.IntEnum):
    """Exit statuses of the command-line tools (docs/getting-started.md, "Exit statuses" lists
    them)."""

    OK = 0
    #: an unexpected error (a bug: the traceback is printed), or a training worker that failed
    ERROR = 1
    #: bad usage: an option, a config key, a task id, a missing optional extra, a bad port
    USAGE = 2
    #: a reward service that cannot be used: dead, refusing, foreign, or failed mid-run in
    #: strict mode; or a server port that is taken
    SERVICE = 3
    #: the run finished but some rewards were fallback values (the service failed mid-run)
    DEGRADED = 4
    #: Ctrl-C (128 + SIGINT)
    INTERRUPTED = 130


class CliError(Exception):
    """An expected failure with its exit status; the message is the one line to print.

    >>> CliError("port 8111 is taken", ExitStatus.SERVICE).status
    <ExitStatus.SERVICE: 3>
    """

    def __init__(self, message: str, status: int = ExitStatus.USAGE) -> None:
        super().__init__(message)
        self.status = status


def debug_requested(flag: bool = False) -> bool:
    """``--debug`` given, or ``EVOLVE_ENVS_DEBUG`` set to a true value.

    >>> debug_requested(True), debug_requested(False) in (True, False)
    (True, True)
    """
    value = os.environ.get(DEBUG_ENV, "").strip().lower()
    return flag or value in ("1", "true", "yes", "on")


def one_line(text: object) -> str:
    """``text`` on one line: its lines joined with ``"; "``, blank ones dropped.

    >>> one_line("reward_model.call_evry: unknown key\\n  did you mean 'call_every'?")
    "reward_model.call_evry: unknown key; did you mean 'call_every'?"
    """
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return "; ".join(lines)


_STRICT_FIX = (
    "restart the service and run again, or set reward_model.fail_on_request_error=false to "
    "finish the run with fallback rewards"
)


def describe_failure(exc: BaseException) -> tuple[int, str] | None:
    """The exit status and the one line for an expected failure, ``None`` for a bug.

    >>> describe_failure(ImportError("the rollout's videos need imageio"))
    (<ExitStatus.USAGE: 2>, "the rollout's videos need imageio")
    >>> describe_failure(KeyError("x")) is None
    True
    """
    if isinstance(exc, CliError):
        return exc.status, one_line(exc)
    try:
        from evolve_envs.reward.clients.errors import RewardServiceError
        from evolve_envs.reward.clients.service_check import ServiceUnavailableError
    except ImportError:  # pragma: no cover - the clients ship with the package
        RewardServiceError = ServiceUnavailableError = ()  # type: ignore[assignment,misc]  # noqa: N806
    if isinstance(exc, ServiceUnavailableError):  # at start: the message names the fix
        return ExitStatus.SERVICE, one_line(exc)
    if isinstance(exc, RewardServiceError):  # mid-run, strict mode
        return (
            ExitStatus.SERVICE,
            one_line(f"the reward service failed mid-run (strict mode): {exc}; {_STRICT_FIX}"),
        )
    if isinstance(exc, ValueError | FileNotFoundError | ImportError):
        return ExitStatus.USAGE, one_line(exc)
    return None


def run_command(prog: str, fn: Callable[[], int], *, debug: bool = False) -> int:
    """Run ``fn`` (a command returning its exit status); print expected failures as one line.

    ``KeyboardInterrupt`` returns 130 with a one-line note (commands that keep partial results
    catch it themselves and say where they are)."""
    show_traceback = debug_requested(debug)
    try:
        return fn()
    except KeyboardInterrupt:
        if show_traceback:
            traceback.print_exc()
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return ExitStatus.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - sorted into expected failures and bugs below
        described = describe_failure(exc)
        if described is None:
            raise
        status, line = described
        if show_traceback:
            traceback.print_exc()
        print(f"{prog}: error: {line}", file=sys.stderr)
        return status


@contextlib.contextmanager
def library_output_to(path: Path) -> Iterator[TextIO]:
    """Keep what libraries write out of the user's terminal for the block: file descriptor 2
    (Ray's start-up warnings, its C++ core worker's log lines, subprocesses such as the embedded
    reward service) and every log record (stamina's retry records, warnings) go to the file
    ``path``; Python-level writes to ``sys.stderr`` (progress bars) and the yielded stream reach
    the terminal. Loggers that hold the process's original stderr stream (Ray's, when Ray was
    imported before the block) write to the file too. On leaving, everything is as before (so
    an error the block raises is printed on the terminal).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    user = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace")
    original = sys.stderr
    root = logging.getLogger()
    handler = logging.StreamHandler(original)  # fd 2: the file, for the block
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
        own_handler = not root.handlers  # else theirs (configure_cli_logging's) writes to fd 2
        if own_handler:
            root.addHandler(handler)
        logging.captureWarnings(True)
        sys.stderr = user
        try:
            yield user
        finally:
            sys.stderr = original
            logging.captureWarnings(False)
            if own_handler:
                root.removeHandler(handler)
            original.flush()
            os.dup2(saved, 2)
            os.close(saved)
            user.flush()
            user.close()


class ContextFormatter(logging.Formatter):
    """Log records as ``<logger>: <message>``, stamina's retry records with their context (what
    failed, which retry, how long until it) instead of the bare ``stamina.retry_scheduled``.

    >>> record = logging.makeLogRecord({"name": "stamina", "msg": "stamina.retry_scheduled",
    ...     "levelno": 30, "stamina.retry_num": 1, "stamina.wait_for": 0.5,
    ...     "stamina.caused_by": "ConnectError('refused')"})
    >>> ContextFormatter().format(record)
    "stamina: reward service call failed (ConnectError('refused')); retry 1 in 0.5 s"
    """

    def format(self, record: logging.LogRecord) -> str:
        if record.name == "stamina" and record.getMessage() == "stamina.retry_scheduled":
            fields = record.__dict__
            return (
                f"stamina: reward service call failed ({fields.get('stamina.caused_by')}); "
                f"retry {fields.get('stamina.retry_num')} in {fields.get('stamina.wait_for')} s"
            )
        return f"{record.name}: {record.getMessage()}"


def configure_cli_logging() -> None:
    """Warnings of the libraries on stderr with the logger's name (and stamina's with their
    context), unless the program configured logging itself."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(ContextFormatter())
    handler.setLevel(logging.WARNING)
    root.addHandler(handler)
