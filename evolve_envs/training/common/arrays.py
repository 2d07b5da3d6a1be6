"""NumPy <-> torch at the edges: the math runs on NumPy arrays, results go back as the caller's
kind (dtype and device kept); torch is imported only when a tensor is seen.

>>> import numpy as np
>>> like(np.array([0.5]), to_numpy([1.0]), torch_of([1.0]))
array([0.5])
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
from numpy.typing import DTypeLike

if TYPE_CHECKING:
    import torch

__all__ = ["Array", "ArrayInput", "torch_of", "to_numpy", "like"]

#: A NumPy array or a torch tensor: what the shared math takes and gives back.
Array: TypeAlias = "np.ndarray | torch.Tensor"
#: What :func:`to_numpy` accepts: an array, a tensor, a (nested) sequence of numbers.
ArrayInput: TypeAlias = "np.ndarray | torch.Tensor | Sequence[object] | float | bool"


def torch_of(*arrays: object) -> ModuleType | None:
    """The ``torch`` module if any argument is a torch tensor, else ``None``."""
    for a in arrays:
        if type(a).__module__.startswith("torch"):
            import torch

            if isinstance(a, torch.Tensor):
                return torch
    return None


def to_numpy(x: ArrayInput | None, dtype: DTypeLike = None, *, name: str = "array") -> np.ndarray:
    """``x`` (a torch tensor, array or sequence) as a NumPy array on the CPU; ``None`` is a
    ``ValueError`` that says ``name`` is required."""
    if x is None:
        raise ValueError(f"{name} is required")
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    return arr.astype(dtype, copy=False) if dtype is not None else arr


def like(
    result: np.ndarray, template: Array, torch_mod: ModuleType | None, *, is_bool: bool = False
) -> Array:
    """``result`` as the kind of ``template``: unchanged for NumPy (``torch_mod`` is ``None``);
    for a tensor, a tensor on its device, with its dtype when floating (else float32) or bool."""
    if torch_mod is None:
        return result
    if is_bool:
        out = torch_mod.from_numpy(np.ascontiguousarray(result.astype(bool)))
    else:
        dtype = template.dtype if template.dtype.is_floating_point else torch_mod.float32
        out = torch_mod.from_numpy(np.ascontiguousarray(result)).to(dtype)
    return out.to(template.device)
