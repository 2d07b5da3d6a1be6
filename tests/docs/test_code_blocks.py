"""Every code block in the README and the docs pages runs, as pasted.

* ``python`` blocks run in order, one subprocess per page (later blocks may use what earlier
  ones built, as a reader following the page would), in an empty working directory;
* ``yaml`` blocks parse, and every ``reward_model``/``env``/``record`` block in them validates
  against the config schema;
* ``bash`` blocks run with ``bash -e`` in an empty working directory;
* ``text`` blocks are diagrams, formulas and sample output: prose, not code.

A block that cannot run here says why, to the reader, on the line above it:
``> Not run in the tests: <reason>``. Such blocks are still checked: a skipped ``bash`` block
must parse (``bash -n``), a skipped ``python`` block must compile.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from evolve_envs import load_config

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
KNOWN = {"python", "yaml", "bash", "text"}
SKIP = re.compile(r"^> Not run in the tests: (\S.*)$")
#: pages whose blocks build LIBERO envs (the simulator: seconds each on a CPU)
LIBERO_PAGES = {"getting-started.md", "wrappers.md", "PRESETS.md"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    skip: str | None  # the reason shown to the reader, when it is not run

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)", lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        i += 1
        body = []
        while not lines[i].strip().startswith("```"):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        before = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
        reason = SKIP.match(before.strip())
        skip = reason.group(1) if reason else None
        if reason is None and before.strip().startswith(">") and start >= 2:
            # a reason that runs over two quoted lines
            prev = next((ln for ln in reversed(lines[: start - 2]) if ln.strip()), "")
            reason = SKIP.match(prev.strip())
            skip = f"{reason.group(1)} {before.strip()[1:].strip()}" if reason else None
        out.append(Block(page, start + 1, lang, "\n".join(body) + "\n", skip))
        i += 1
    return out


BLOCKS = [b for page in PAGES for b in _blocks(page)]


def _params(lang: str) -> list:
    pages = sorted({b.page for b in BLOCKS if b.lang == lang and b.skip is None})
    return [
        pytest.param(p, id=str(p.relative_to(ROOT)),
                     marks=[pytest.mark.libero] if p.name in LIBERO_PAGES else [])
        for p in pages
    ]  # fmt: skip


def test_every_block_names_its_language() -> None:
    unknown = [f"{b} ```{b.lang}" for b in BLOCKS if b.lang not in KNOWN]
    assert unknown == []
    assert sum(b.lang == "python" and b.skip is None for b in BLOCKS) >= 10


def test_skipped_blocks_still_parse() -> None:
    for b in BLOCKS:
        if b.skip is None:
            continue
        if b.lang == "bash":
            out = subprocess.run(["bash", "-n"], input=b.code, capture_output=True, text=True)
            assert out.returncode == 0, f"{b}: {out.stderr}"
        elif b.lang == "python":
            compile(b.code, str(b), "exec")


@pytest.mark.parametrize("page", _params("python"))
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    blocks = [b for b in BLOCKS if b.page == page and b.lang == "python" and b.skip is None]
    script = "".join(
        f"print('--- block {b}', flush=True)\n{b.code}\n" for b in blocks
    )  # the marker names the block that failed
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
        timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    ran = [ln for ln in out.stdout.splitlines() if ln.startswith("--- block ")]
    assert out.returncode == 0, f"{ran[-1] if ran else page} failed:\n{out.stderr[-3000:]}"
    assert len(ran) == len(blocks)


def _config_blocks(data: object) -> list[dict]:
    """The stack-config mappings in a YAML block: the block itself when its keys are stack
    blocks, else every nested ``reward_model`` mapping (RLinf's ``env.train.reward_model``)."""
    if not isinstance(data, dict):
        return []
    if data and set(data) <= {"env", "reward_model", "record"}:
        return [data]
    found = []
    for key, value in data.items():
        if key == "reward_model" and isinstance(value, dict):
            found.append({"reward_model": value})
        else:
            found += _config_blocks(value)
    return found


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "yaml"], ids=lambda b: str(b))
def test_yaml_blocks_parse_and_validate(block: Block) -> None:
    data = yaml.safe_load(textwrap.dedent(block.code))
    configs = _config_blocks(data)
    assert configs, f"{block}: no config block in it"
    for cfg in configs:
        load_config(cfg, environ={})  # raises ConfigError naming the key


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.lang == "bash" and b.skip is None], ids=lambda b: str(b)
)
def test_bash_blocks_run(block: Block, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(
        ["bash", "-e", "-c", block.code], cwd=tmp_path, capture_output=True, text=True,
        timeout=600, env=env,
    )  # fmt: skip
    assert out.returncode == 0, f"{block} failed:\n{out.stderr[-3000:]}"
