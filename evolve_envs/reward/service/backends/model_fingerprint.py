"""Which model is this? An id and a cheap revision for a model directory.

Example:
    >>> model_id_from_path("/hf/hub/models--Qwen--Qwen2.5-VL-7B-Instruct/snapshots/" + "a" * 40)
    'Qwen/Qwen2.5-VL-7B-Instruct'
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

__all__ = ["model_id_from_path", "model_fingerprint"]

_SNAPSHOT = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<sha>[0-9a-f]{40})")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_EDGE = 64 * 1024


def model_id_from_path(path: str | os.PathLike[str]) -> str:
    """A readable model id for a model directory (see module docs)."""
    text = Path(path).as_posix()
    match = _SNAPSHOT.search(text)
    if match:
        return f"{match['org']}/{match['name']}"
    return Path(text.rstrip("/")).name or text


def model_fingerprint(path: str | os.PathLike[str]) -> str | None:
    """The revision of a model directory (see module docs); None if it cannot be read."""
    text = Path(path).as_posix()
    match = _SNAPSHOT.search(text)
    if match:
        return match["sha"]
    root = Path(path)
    if not root.is_dir():
        return None
    digest = hashlib.sha256()
    config = root / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for file in sorted(p for p in root.iterdir() if p.suffix in _WEIGHT_SUFFIXES and p.is_file()):
        size = file.stat().st_size
        digest.update(f"{file.name}:{size}".encode())
        with open(file, "rb") as fh:
            digest.update(fh.read(_EDGE))
            if size > 2 * _EDGE:
                fh.seek(size - _EDGE)
                digest.update(fh.read(_EDGE))
    return "sha256:" + digest.hexdigest()[:16]
