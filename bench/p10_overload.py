"""P10: more rollout envs than the reward service admits at once: backpressure, not fallbacks.

A reward service (mock backend, ``rule: reach_place``) whose backend sleeps ``--latency-ms``
(default 50) per batch and that admits ``--admission`` requests at once (default 8; more get 503
with ``Retry-After``), and the shipped ``reach_place_async`` DistRL run pointed at it with
``--workers`` x ``--envs`` envs (default 2 x 8) on ``calls: deferred`` for ``--minutes`` (default
1.5). Each env's client may hold several checks in flight, so together they ask for far more than
8 at once: the storm a 16-core machine with 12 workers hits at the default limit of 256.

Printed: the run's exit status, fallback episodes over episodes, the deferred envs' saturation
waits. Before the overload answer was
backpressure this run exited 4 with about half of its episodes on fallback rewards.

Run::

    .venv/bin/python bench/p10_overload.py                    # ~2.5 min
    .venv/bin/python bench/p10_overload.py --minutes 0.5      # ~1 min
    .venv/bin/python bench/p10_overload.py --kill-after-s 20  # the service dies: exit 4
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import ROOT, machine_note

from evolve_envs.reward.service.hosting.embedded import EmbeddedService

CONFIG = ROOT / "evolve_envs" / "configs" / "distrl" / "reach_place_async.yaml"


def run(args: argparse.Namespace) -> dict[str, object]:
    """One training run against a service with a low admission limit; its counts."""
    svc = EmbeddedService(
        "mock",
        {"rule": "reach_place", "latency_ms": args.latency_ms},
        extra_args=["--max-concurrent-requests", str(args.admission)],
    ).start()
    run_dir = Path(tempfile.mkdtemp(prefix="p10-")) / "run"
    killer = None
    if args.kill_after_s is not None:
        killer = threading.Timer(args.kill_after_s, os.kill, (svc.pid, signal.SIGKILL))
        killer.start()
    cmd = [
        sys.executable,
        "-m",
        "evolve_envs.cli.main",
        "train",
        "--config",
        str(CONFIG),
        "--algo",
        "distrl",
        "--run-dir",
        str(run_dir),
        "--minutes",
        str(args.minutes),
        "--no-progress-bar",
        f"reward_model.endpoint={svc.url}",
        f"workers.num_workers={args.workers}",
        f"workers.num_envs={args.envs}",
        "workers.num_cpus=0.01",
        "run.log_every_s=15",
        *args.override,
    ]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    finally:
        if killer is not None:
            killer.cancel()
        svc.stop()
    rows = []
    metrics = run_dir / "metrics.csv"
    if metrics.is_file():
        with metrics.open() as fh:
            rows = list(csv.DictReader(fh))
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    return {
        "exit": proc.returncode,
        "wall_s": round(time.monotonic() - start, 1),
        "episodes": sum(int(float(r.get("episodes") or 0)) for r in rows),
        "fallback_episodes": sum(int(float(r.get("fallback_episodes") or 0)) for r in rows),
        "saturation_waits": max(
            (int(float(r.get("saturation_waits") or 0)) for r in rows), default=0
        ),  # fmt: skip
        "degraded": summary.get("degraded"),
        "stderr_tail": proc.stderr.strip().splitlines()[-6:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--admission", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--minutes", type=float, default=1.5)
    parser.add_argument("--kill-after-s", type=float, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the result here too")
    parser.add_argument("override", nargs="*", help="extra key=value overrides for the run")
    args = parser.parse_args(argv)
    result = run(args)
    print(machine_note())
    print(
        f"{args.workers} workers x {args.envs} envs, admission {args.admission}, "
        f"{args.latency_ms:g} ms a batch, {args.minutes:g} min"
    )
    for key, value in result.items():
        print(f"  {key}: {value}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         **result}, indent=2, default=str) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
