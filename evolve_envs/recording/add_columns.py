"""A copy of a dataset with new per-frame columns: how relabelling writes, never in place.

>>> import json, tempfile, numpy as np
>>> from evolve_envs.recording.episodes import EpisodeWriter, open_recording
>>> src, dst = tempfile.mkdtemp() + "/rec", tempfile.mkdtemp() + "/new"
>>> _ = EpisodeWriter(src).write([np.zeros((8, 8, 3), np.uint8)] * 2, [{}, {}], {"task": "t"})
>>> features = {"reward_model.m.progress": {"dtype": "float32", "shape": [1], "names": None}}
>>> copy_with_columns(src, dst, {0: {"reward_model.m.progress": [0.0, 50.0]}}, features)
>>> open_recording(dst)[0].column("reward_model.m.progress")
[0.0, 50.0]
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evolve_envs.recording.lerobot_arrow import arrow_type
from evolve_envs.recording.lerobot_stats import aggregate_stats, feature_stats

if TYPE_CHECKING:
    import pyarrow as pa


__all__ = ["copy_with_columns"]

#: per episode (its position in the dataset), per new column, one value per row
Columns = Mapping[int, Mapping[str, Sequence[object]]]


def copy_with_columns(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    columns: Columns,
    features: Mapping[str, Mapping[str, object]],
) -> None:
    """Copy the dataset ``src`` into the new folder ``dst`` with ``columns`` added.

    ``features`` describes each new column (``dtype``, ``shape``, ``names``); docs/RECORDING.md."""
    src, dst = Path(src), Path(dst)
    if dst.exists():
        raise FileExistsError(f"{dst} exists; the new dataset needs a new folder")
    if (src / "meta" / "info.json").is_file():
        _lerobot(src, dst, columns, features)
    else:
        _recording(src, dst, columns, features)


def _copy_tree(src: Path, dst: Path, skip: set[Path]) -> None:
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if rel in skip or not path.is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dst / rel)


def _array(values: Sequence[object], feature: Mapping[str, object]) -> pa.Array:
    import pyarrow as pa

    kind = arrow_type(feature)
    if pa.types.is_fixed_size_list(kind):
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat, kind.value_type), kind.list_size)
    return pa.array(list(values), type=kind)


def _numeric(feature: Mapping[str, object]) -> bool:
    return feature["dtype"] != "string"


def _lerobot(src: Path, dst: Path, columns: Columns, features: Mapping[str, object]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    info = json.loads((src / "meta" / "info.json").read_text())
    clash = sorted(set(features) & set(info["features"]))
    if clash:
        raise ValueError(f"{src} already has the columns {', '.join(clash)}")
    data_files = sorted((src / "data").rglob("*.parquet"))
    episode_files = sorted((src / "meta" / "episodes").rglob("*.parquet"))
    skip = {p.relative_to(src) for p in data_files + episode_files}
    skip |= {Path("meta/info.json"), Path("meta/stats.json")}
    _copy_tree(src, dst, skip)
    for path in data_files:
        table = pq.read_table(path)
        episodes = table.column("episode_index").to_pylist()
        frames = table.column("frame_index").to_pylist()
        for name, feature in features.items():
            try:
                values = [columns[e][name][f] for e, f in zip(episodes, frames, strict=True)]
            except (KeyError, IndexError):
                raise ValueError(f"no {name} value for every row of {path}") from None
            field = pa.field(name, arrow_type(feature))
            table = table.append_column(field, _array(values, feature))
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out, compression="snappy")
    per_episode: dict[str, list[dict[str, np.ndarray]]] = {n: [] for n in features}
    for path in episode_files:
        table = pq.read_table(path)  # its columns kept as they are; stats columns appended
        added: dict[str, list[object]] = {}
        for episode in table.column("episode_index").to_pylist():
            for name, feature in features.items():
                if not _numeric(feature):
                    continue
                stats = feature_stats(np.asarray(columns[episode][name]))
                per_episode[name].append(stats)
                for stat, value in stats.items():
                    added.setdefault(f"stats/{name}/{stat}", []).append(np.asarray(value).tolist())
        for name, values in added.items():
            table = table.append_column(name, pa.array(values))
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out)
    info["features"] = {**info["features"], **{k: dict(v) for k, v in features.items()}}
    (dst / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    stats_path = src / "meta" / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    for name, found in per_episode.items():
        if found:
            stats[name] = {k: np.asarray(v).tolist() for k, v in aggregate_stats(found).items()}
    (dst / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))


def _recording(src: Path, dst: Path, columns: Columns, features: Mapping[str, object]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evolve_envs.recording.episodes import Recording

    rec = Recording(src)
    files = {Path(ep.meta["file"]) for ep in rec}
    _copy_tree(src, dst, files | {Path("meta.json")})
    for i, ep in enumerate(rec):
        table = ep.table()
        clash = sorted(set(features) & set(table.column_names))
        if clash:
            raise ValueError(f"{src} already has the columns {', '.join(clash)}")
        for name, feature in features.items():
            values = list(columns[i][name])
            if len(values) != table.num_rows:
                raise ValueError(f"{len(values)} {name} values for {table.num_rows} rows")
            field = pa.field(name, arrow_type(feature))
            table = table.append_column(field, _array(values, feature))
        out = dst / str(ep.meta["file"])
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out)
    meta = dict(rec.meta)
    meta["added_columns"] = [*meta.get("added_columns", []), *features]
    (dst / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
