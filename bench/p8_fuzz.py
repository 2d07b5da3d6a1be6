"""P8: a long fuzz run of the reward service (the same fuzzer `make test` runs briefly).

Runs `tests/fuzz/test_fuzz.py` (structure-aware hypothesis strategies for the pickle codec,
image and video decoding, the JSON wire models and HTTP framing; every case sent to a real
`evolve-reward-server --backend mock` at the default limits under an address-space cap) with
`--examples` cases per target instead of the short default, then prints, per target, the cases
tried, the worst peak RSS growth of the server for one case and the slowest answer. A crash,
hang, 5xx or memory breach fails the run and leaves its reproducer in `tests/fuzz/corpus/`.

    .venv/bin/python bench/p8_fuzz.py --examples 800   # ~8 min on 2 shared cores
    .venv/bin/python bench/p8_fuzz.py --quick           # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import ROOT, machine_note, print_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=800, help="cases per fuzz target")
    parser.add_argument("--quick", action="store_true", help="smoke run (20 cases per target)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (random if unset)")
    args = parser.parse_args()
    examples = 20 if args.quick else args.examples
    print(machine_note())
    with tempfile.TemporaryDirectory() as tmp:
        stats_path = os.path.join(tmp, "stats.jsonl")
        env = {**os.environ, "EVOLVE_FUZZ_EXAMPLES": str(examples), "EVOLVE_FUZZ_STATS": stats_path}
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "tests/fuzz/test_fuzz.py",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
        if args.seed is not None:
            cmd.append(f"--hypothesis-seed={args.seed}")
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        elapsed = time.monotonic() - start
        print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:])
        if proc.returncode != 0:
            print(proc.stdout[-6000:])
        with open(stats_path) as fh:
            stats = [json.loads(line) for line in fh]
    rows = []
    for module in stats:
        for target, figures in sorted(module["targets"].items()):
            rows.append([target, figures["cases"], figures["worst_growth_mb"], figures["worst_s"]])
        total = module["cases"]
        rows.append(["all", total, module["worst_growth_mb"], module["worst_seconds"]])
        statuses = ", ".join(f"{code}: {n}" for code, n in module["statuses"].items())
        print(f"statuses over all cases: {statuses}")
        print(f"largest growth: {module['worst_growth_case']}")
    print()
    print_table(
        f"P8: fuzz run, {examples} cases per target, {elapsed:.0f} s "
        f"({'passed' if proc.returncode == 0 else 'FAILED'})",
        ["target", "cases", "worst peak RSS growth MB", "slowest answer s"],
        rows,
    )
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
