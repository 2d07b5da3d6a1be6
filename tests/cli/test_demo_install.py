"""`make demo` runs the demo and installs what it needs: TensorBoard for the events the docs
promise, pyarrow for its recording, every extra the demo checks for."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _demo_extras() -> list[str]:
    """The extras of the `pip install -e '.[...]'` line of the Makefile's `.installed-demo`."""
    text = (ROOT / "Makefile").read_text()
    block = re.search(r"^\$\(VENV\)/\.installed-demo:.*?(?=^\S)", text, re.M | re.S)
    assert block, "the Makefile has no .installed-demo target"
    found = re.search(r"pip install -q -e '\.\[([^\]]*)\]'", block.group(0))
    assert found, block.group(0)
    return [extra.strip() for extra in found.group(1).split(",")]


def _requirements(extras: list[str]) -> set[str]:
    """The distribution names that setup.cfg's ``extras`` (plus install_requires) bring."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in extras:
        lines += cfg["options.extras_require"][extra].splitlines()
    return {
        re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0].lower()
        for line in lines
        if line.strip()
    }


def test_make_demo_installs_tensorboard_the_readme_promises() -> None:
    extras = _demo_extras()
    promise = (ROOT / "README.md").read_text() + (ROOT / "docs" / "getting-started.md").read_text()
    assert "TensorBoard" in promise and "runs/demo/libero/tensorboard/" in promise  # the promise
    assert "tensorboard" in _requirements(extras), extras
    # and what the demo runs needs the rest of its report too
    assert {"tqdm", "matplotlib", "imageio", "imageio-ffmpeg", "fastapi", "uvicorn"} <= (
        _requirements(extras)
    )


def test_make_demo_runs_the_demo_with_every_extra_it_needs() -> None:
    from evolve_envs.cli.demo import DEMO_NEEDS

    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", text, re.M)
    assert recipe and "evolve-envs demo" in recipe.group(1)
    assert set(DEMO_NEEDS.values()) <= set(_demo_extras())  # pyarrow (record) among them
    assert "pyarrow" in _requirements(_demo_extras())
