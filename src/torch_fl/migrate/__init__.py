"""Migration of CUDA-coupled code: static scan and fix, the runtime CUDA alias, the dynamic audit.

Kept light: ``import torch_fl.migrate`` runs at every ``import torch`` when torch-fl is installed (the
``FL_CUDA_ALIAS`` autoload hook lives here), so submodules load on first use and libcst only in the fixer.
"""

from __future__ import annotations

from .._imports import lazy_getattr

# Public name -> submodule that defines it, imported on first access.
_LAZY = {"cuda_alias": "alias"}
__getattr__ = lazy_getattr(globals(), _LAZY)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["cuda_alias"]
