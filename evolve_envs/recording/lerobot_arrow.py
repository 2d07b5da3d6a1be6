"""The Arrow side of LeRobotDataset v3: column types of features and ``meta/tasks.parquet``.

>>> tasks_table(["open the drawer", "close it"]).column("task").to_pylist()
['open the drawer', 'close it']
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


__all__ = ["arrow_type", "pyarrow_modules", "tasks_table"]


def pyarrow_modules() -> tuple[ModuleType, ModuleType]:
    """``(pyarrow, pyarrow.parquet)``, or an ImportError naming the extra that installs them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - pyarrow comes with the record extra
        raise ImportError(
            "LeRobot datasets need pyarrow: pip install 'evolve-envs[record]'"
        ) from exc
    return pa, pq


def arrow_type(feature: Mapping[str, object]) -> pa.DataType:
    """The Arrow type of a non-video feature's column: a scalar for shape ``[1]``, a
    fixed-size list for ``[n]`` (as Hugging Face ``datasets`` writes ``Sequence(length=n)``).

    >>> str(arrow_type({"dtype": "float32", "shape": [7]}))
    'fixed_size_list<item: float>[7]'
    """
    pa, _ = pyarrow_modules()
    scalar = {
        "float32": pa.float32(),
        "float64": pa.float64(),
        "int64": pa.int64(),
        "int32": pa.int32(),
        "bool": pa.bool_(),
        "string": pa.string(),
    }
    dtype, shape = feature["dtype"], list(feature["shape"])
    if dtype not in scalar:
        raise ValueError(f"unsupported feature dtype {dtype!r} (use {', '.join(scalar)})")
    if shape == [1]:
        return scalar[dtype]
    if len(shape) == 1:
        return pa.list_(scalar[dtype], int(shape[0]))
    raise ValueError(f"only 1-D features are written, got shape {shape}")


def tasks_table(tasks: Sequence[str]) -> pa.Table:
    """``meta/tasks.parquet`` as pandas writes ``DataFrame({"task_index": ...}, index=task)``:
    the ``task`` column is the frame's index (LeRobot looks tasks up by it)."""
    pa, _ = pyarrow_modules()
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    schema = pa.schema([("task_index", pa.int64()), ("task", pa.string())]).with_metadata(
        {b"pandas": json.dumps(pandas_meta).encode()}
    )
    return pa.table({"task_index": list(range(len(tasks))), "task": list(tasks)}, schema=schema)
