"""What the command-line tools show: library output goes to the run's log file, the user's own
lines and errors reach the terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import logging, os, sys
from pathlib import Path
from evolve_envs.cli.errors import configure_cli_logging, library_output_to

configure_cli_logging()
log = Path(sys.argv[1])
with library_output_to(log) as user:
    os.write(2, b"[core_worker.cc] native noise\\n")  # what C++ code writes to fd 2
    logging.getLogger("stamina").warning(
        "stamina.retry_scheduled", extra={"stamina.retry_num": 1, "stamina.wait_for": 0.1,
                                          "stamina.caused_by": "ConnectError()"})
    print("a progress bar", file=sys.stderr, flush=True)  # Python-level stderr: the user
    print("updates 3 return 0.5", file=user)
print("after: an error line", file=sys.stderr)
"""


def test_library_output_goes_to_the_log_and_the_run_lines_to_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "run" / "train.log"
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(log)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "a progress bar",
        "updates 3 return 0.5",
        "after: an error line",
    ]
    kept = log.read_text()
    assert "native noise" in kept
    assert "stamina: reward service call failed (ConnectError()); retry 1 in 0.1 s" in kept
