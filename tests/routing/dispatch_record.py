"""A test helper: the aten overloads called in a block (a dispatch mode sees every call, the emulated
device's included). Imported by the routing tests (pytest puts this folder on sys.path)."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class CalledOps(TorchDispatchMode):
    """``with CalledOps() as ops: ...`` then ``ops.names``: each call's ``aten::name``, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        self.names.append(func._schema.name)
        return func(*args, **(kwargs or {}))
