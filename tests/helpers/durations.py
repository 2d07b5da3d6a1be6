"""The durations profile of a test run: the slowest tests and the time per test folder.

Reads the JUnit XML that ``pytest --junitxml`` writes (setup, call and teardown of each test
summed) and prints two Markdown tables::

    python -m pytest -q --junitxml=report.xml
    python -m tests.helpers.durations report.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def durations(report: Path) -> dict[str, float]:
    """Test id (``tests/a/test_b.py::test_c``) -> seconds."""
    out: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        module = case.get("classname", "")
        # pytest writes "tests.a.test_b" or "tests.a.test_b.TestClass"
        path = module.replace(".", "/")
        while path and not Path(path + ".py").is_file() and "/" in path:
            path = path.rpartition("/")[0]
        out[f"{path}.py::{case.get('name')}"] = float(case.get("time", 0.0))
    return out


def folder_of(test_id: str, depth: int = 2) -> str:
    """``tests/reward/service/test_x.py::t`` -> ``tests/reward`` (the first ``depth`` parts)."""
    parts = test_id.split("::")[0].split("/")[:-1]
    return "/".join(parts[:depth])


def profile(times: dict[str, float], slowest: int = 20) -> str:
    """The slowest tests and the total per folder, as Markdown tables."""
    lines = ["| seconds | test |", "|---:|---|"]
    for test, s in sorted(times.items(), key=lambda kv: -kv[1])[:slowest]:
        lines.append(f"| {s:.1f} | `{test}` |")
    per_folder: Counter[str] = Counter()
    for test, s in times.items():
        per_folder[folder_of(test)] += s
    lines += ["", "| folder | tests | seconds |", "|---|---:|---:|"]
    counts = Counter(folder_of(t) for t in times)
    for folder, s in per_folder.most_common():
        lines.append(f"| `{folder}` | {counts[folder]} | {s:.0f} |")
    lines.append(f"| all | {len(times)} | {sum(times.values()):.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(profile(durations(Path(sys.argv[1]))))
