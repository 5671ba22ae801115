"""Migration of CUDA-coupled code: static scan and fix, the runtime CUDA alias, the dynamic audit.

Kept light: ``import torch_fl.migrate`` runs at every ``import torch`` when torch-fl is installed (the
``FL_CUDA_ALIAS`` autoload hook lives here), so submodules load on first use and libcst only in the fixer.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> submodule that defines it, imported on first access.
_LAZY = {"cuda_alias": "alias"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torch_fl.migrate' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["cuda_alias"]
