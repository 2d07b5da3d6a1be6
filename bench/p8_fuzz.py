"""P8: a long fuzz run of the reward service (the same fuzzer `make test` runs briefly).

Runs `tests/fuzz/test_fuzz.py` (structure-aware hypothesis strategies for the pickle codec,
image and video decoding, the JSON wire models and HTTP framing; every case sent to a real
`evolve-reward-server --backend mock` at the default limits under an address-space cap) with
`--examples` cases per target instead of the short default, then prints, per target, the cases
tried, the worst peak RSS growth of the server for one case and the slowest answer. A crash,
hang, 5xx or memory breach fails the run and leaves its reproducer in `tests/fuzz/corpus/`.

    .venv/bin/python bench/p8_fuzz.py --examples 800   # ~8 min on 2 shared cores
    .venv/bin/python bench/p8_fuzz.py --quick           # smoke run

`--atheris SECONDS` also runs the coverage-guided in-process targets
(`tests/fuzz/atheris_targets.py`, needs the `fuzz` extra) for SECONDS each, under libFuzzer's
RSS limit of 2 GiB and 10 s per input; a crash's input goes to the corpus as a `.req` case.
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


def atheris_part(seconds: int) -> list[list[object]]:
    """Run every atheris target for `seconds`; rows: target, runs, coverage, result."""
    from tests.fuzz.atheris_targets import TARGETS, case_for
    from tests.fuzz.harness import CORPUS

    rows: list[list[object]] = []
    for target in TARGETS:
        with tempfile.TemporaryDirectory() as artifacts:
            cmd = [
                sys.executable, "-m", "tests.fuzz.atheris_targets", target,
                f"-max_total_time={seconds}", "-rss_limit_mb=2048", "-timeout=10",
                f"-artifact_prefix={artifacts}/",
            ]  # fmt: skip
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            done = [line for line in proc.stderr.splitlines() if "DONE" in line or "cov:" in line]
            cov = done[-1].split("cov:")[1].split()[0] if done and "cov:" in done[-1] else "-"
            runs = next(
                (line.split()[1] for line in proc.stderr.splitlines() if line.startswith("Done ")),
                "-",
            )
            result = "clean"
            for name in os.listdir(artifacts):  # crashes, OOMs, timeouts: into the corpus
                case = case_for(target, open(os.path.join(artifacts, name), "rb").read())
                (CORPUS / case.name(f"{target}-atheris")).write_bytes(case.dumps())
                result = f"FOUND {name.split('-')[0]} (saved to the corpus)"
            if proc.returncode != 0 and result == "clean":
                result = f"FAILED (exit {proc.returncode})"
                print(proc.stderr[-3000:])
            rows.append([target, runs, cov, result])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=800, help="cases per fuzz target")
    parser.add_argument("--quick", action="store_true", help="smoke run (20 cases per target)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (random if unset)")
    parser.add_argument(
        "--atheris", type=int, default=0, metavar="SECONDS", help="atheris seconds per target"
    )
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
    failed = proc.returncode != 0
    if args.atheris:
        rows = atheris_part(args.atheris)
        print()
        print_table(
            f"P8b: atheris (coverage-guided, in process), {args.atheris} s per target",
            ["target", "runs", "coverage (edges)", "result"],
            rows,
        )
        failed = failed or any(row[3] != "clean" for row in rows)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
