"""RLinf's two config layouts (0.3's ``training_backend``, ``main``'s ``hybrid_engines``).

:func:`with_layout` adds ``rlinf_layout=<installed>`` unless the command line names one;
:func:`compose` composes a config as RLinf's launch script does (docs/rlinf.md).

    >>> installed_layout("0.3.0"), installed_layout("0.4.0"), installed_layout("0.4.0.dev2")
    ('training_backend', 'hybrid_engines', 'hybrid_engines')
    >>> with_layout(["a=1", "rlinf_layout=hybrid_engines"], "0.3.0")
    ['a=1', 'rlinf_layout=hybrid_engines']
"""

from __future__ import annotations

import os
import re
import warnings
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

__all__ = [
    "LAYOUTS",
    "SWITCH",
    "compose",
    "config_uses_layout",
    "installed_layout",
    "with_layout",
]

#: The Hydra group of our configs that chooses RLinf's layout (the documented switch).
SWITCH = "rlinf_layout"
#: Its options: the RLinf group that holds the FSDP settings, and the RLinf versions that use it.
LAYOUTS = {
    "training_backend": "RLinf 0.3.x (PyPI)",
    "hybrid_engines": "RLinf main (0.4)",
}


def installed_layout(version: str | None = None) -> str:
    """The layout of RLinf ``version`` (default: the installed one; 0.3's without RLinf)."""
    if version is None:
        try:
            version = package_version("rlinf")
        except PackageNotFoundError:
            return "training_backend"
    match = re.match(r"(\d+)\.(\d+)", version)
    major, minor = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    return "hybrid_engines" if (major, minor) >= (0, 4) else "training_backend"


def config_uses_layout(config_path: str | None, config_name: str | None) -> bool:
    """Whether ``config_path/config_name.yaml`` selects ``rlinf_layout`` (ours do)."""
    if not config_path or not config_name:
        return False
    path = Path(config_path) / f"{config_name.removesuffix('.yaml')}.yaml"
    try:
        text = path.read_text()
    except OSError:
        return False
    return re.search(rf"^\s*-\s*{SWITCH}\s*:", text, re.MULTILINE) is not None


def with_layout(
    overrides: list[str],
    version: str | None = None,
    *,
    config_path: str | None = None,
    config_name: str | None = None,
) -> list[str]:
    """``overrides`` plus ``rlinf_layout=<installed>`` unless named (with ``config_path`` and
    ``config_name``: only for a config that selects it)."""
    if any(o.lstrip("+~").startswith(SWITCH + "=") for o in overrides):
        return list(overrides)
    if config_name is not None and not config_uses_layout(config_path, config_name):
        return list(overrides)
    return [*overrides, f"{SWITCH}={installed_layout(version)}"]


def compose(config_path: str, config_name: str, overrides: list[str]) -> Any:
    """Compose a config with Hydra as RLinf's launch script does (naming the layout switch)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import MissingConfigException

    with warnings.catch_warnings():
        # RLinf composes with Hydra 1.1's behaviour; newer Hydras warn about it on every call
        warnings.filterwarnings("ignore", message=r"\s*version_base=\"1\.1\" selects")
        with initialize_config_dir(config_dir=os.path.abspath(config_path), version_base="1.1"):
            try:
                return hydra_compose(config_name=config_name, overrides=overrides)
            except MissingConfigException as exc:
                raise _layout_error(exc) from None


def _layout_error(exc: Exception) -> Exception:
    """``exc``, or a ValueError naming the switch when a group of one layout is missing."""
    message = str(exc).splitlines()[0].rstrip(".")
    pairs = (("training_backend", "hybrid_engines"), ("hybrid_engines", "training_backend"))
    for wanted, other in pairs:
        if f"'{wanted}/" in message:
            return ValueError(
                f"{message}: the RLinf config tree on Hydra's search path (EMBODIED_PATH) has "
                f"no '{wanted}/' group; if it is {LAYOUTS[other]}'s, add {SWITCH}={other} to "
                "the command line"
            )
    return exc
