"""Factories: calls with ``device="emu"`` and no EmuTensor argument (``torch.zeros(.., device=d)``)
reach one backend fallback registered on the PrivateUse1 key, plus per-op kernels for the factories
PyTorch implements as CompositeExplicitAutograd; and host pinning for the emulated device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..._names import RouteKind
from ..._opnames import canonical_op_name
from ..router import first_dtype
from ..table import Route
from . import rng as _rng
from . import sparse as _sparse
from . import storage as _storage
from .copies import _copy_
from .slot import _no_device, backend_name, state
from .tensor import SPECIAL, _check_outputs, _first_device_tensor, _sparse_chip, _wrap, never_traced

aten = torch.ops.aten


def _factory_fallback(ovl: Any, *args: Any, **kwargs: Any) -> Any:
    target = kwargs.get("device")
    index = state.current if target is None or target.index is None else target.index
    if index >= state.count:
        raise _no_device(index)
    random = _random.get(ovl)
    if random is None:
        random = _random[ovl] = _rng.seeded(ovl)
    if random:  # torch.rand(.., device=d) and friends draw from the device's generator (rng.py)
        return _rng.call(ovl, index, lambda kernel, a, k: _make(ovl, index, a, k, kernel), args, kwargs)
    return _make(ovl, index, args, kwargs)


_random: dict[Any, bool] = {}
never_traced(_factory_fallback.__code__)  # (tensor.never_traced: kernels below the dispatcher)


def _make(ovl: Any, index: int, args: tuple, kwargs: dict, kernel: Any = None) -> Any:
    """The device tensor factory `ovl` makes; `kernel`: what computes it instead of `ovl` (a random
    factory's sibling that takes the device's generator: rng.py)."""
    if kernel is None:
        kernel = ovl
    cpu_kwargs = dict(kwargs)
    if "device" in cpu_kwargs:
        cpu_kwargs["device"] = torch.device("cpu")
    if cpu_kwargs.get("pin_memory"):
        cpu_kwargs["pin_memory"] = False
    if state.on_first_tensor is not None:  # the process's first device tensor: its routing starts now
        _first_device_tensor()
    router = state.router
    if router is None or _empty(ovl, args):
        # unchecked, or a placeholder of no elements (batch_norm's uint8 reserve of size 0): no chip
        # needs a kernel or a dtype for it
        return _wrap(kernel(*args, **cpu_kwargs), index)
    dtype = first_dtype(args, cpu_kwargs)
    op = state.names.get(ovl)
    if op is None:
        op = state.names[ovl] = canonical_op_name(ovl)
    if dtype is not None and dtype not in state.dtypes:
        # a tensor the chip cannot hold: fail at its creation, as the chip does
        raise router.error(op, args, kwargs, Route(RouteKind.UNSUPPORTED, "precision.dtypes"),
                           f"it produces {dtype}, which is not in precision.dtypes")
    layout = kwargs.get("layout")
    if layout is not None and layout is not torch.strided:
        chip = _sparse_chip()
        if chip is not None:
            # a sparse factory reaches the chip's sparse key, where its plugin's sparse kernels decide
            key = _sparse.key_of(layout)
            if not _sparse.registered(chip, key, ovl, op):
                raise _sparse.refusal(chip, key, op, backend_name())
            return _wrap(kernel(*args, **cpu_kwargs), index)
    route = state.routes.get((ovl, dtype))
    if route is None:
        route = state.routes[(ovl, dtype)] = state.table.route(op, dtype)
    if route.kind is RouteKind.NATIVE:
        out = kernel(*args, **cpu_kwargs)
        _check_outputs(ovl, route, args, kwargs, out)
        return _wrap(out, index)
    return router.call(op, ovl, route, dtype, args, kwargs,
                       native=lambda a, k: _wrap(kernel(*args, **cpu_kwargs), index))


def _empty(ovl: Any, args: tuple) -> bool:
    """A factory call for a tensor of no elements (its size is its first argument)."""
    size = args[0] if args and ovl._schema.arguments and ovl._schema.arguments[0].name == "size" else None
    return isinstance(size, (list, tuple)) and 0 in size


_libraries: list[Any] = []


def _register_factories() -> None:
    """One backend fallback for factories without a kernel of their own, and per-op kernels for the
    factories PyTorch implements as CompositeExplicitAutograd (arange, zeros, randn, ...): those would
    otherwise decompose into ``empty`` plus an out= variant before any backend sees the call, and a chip
    is asked for ``arange``, not ``arange.start_out``. The libraries live as long as the process: a
    backend cannot be unregistered."""
    library = torch.library.Library("_", "IMPL")
    library.fallback(_factory_fallback, "PrivateUse1")
    # torch.empty(.., layout=torch.sparse_coo, device=d) and the sparse constructors without device tensors
    # among their arguments dispatch to the device's sparse key
    library.fallback(_factory_fallback, "SparsePrivateUse1")
    per_op = torch.library.Library("aten", "IMPL")
    # torch.tensor(data, device=d) copies into the new device tensor with the Python key excluded: the
    # call reaches PrivateUse1 itself, where PyTorch's Python fallback cannot serve it (a per-op kernel can)
    per_op.impl("copy_", _copy_kernel, "PrivateUse1")
    # With a dispatch mode on the stack (FakeTensorMode under torch.compile), or with an EmuTensor among the
    # arguments, PyTorch hands a Python kernel's call to the registration of that very op on the key, and a
    # backend fallback has none: `func != nullptr INTERNAL ASSERT FAILED (python_dispatch.cpp)`.
    # torch.tensor(data, device=d) makes its tensor with ``empty`` (on d with a mode, via ``_to_copy``) and
    # reads each 0-dim tensor of `data` with ``_local_scalar_dense``, both with the Python key excluded: so
    # these reach the key, and have kernels of their own.
    for name in ("empty.memory_format", "empty_strided"):
        per_op.impl(name, _factory_kernel(_overload(f"aten::{name}")), "PrivateUse1")
    per_op.impl("_local_scalar_dense", _item_kernel, "PrivateUse1")
    for name in _composite_factories():
        ovl = _overload(name)
        per_op.impl(name[len("aten::"):], _factory_kernel(ovl), "PrivateUse1")
    _libraries.extend((library, per_op, _pinning()))


def _pinning() -> Any:
    """Pinned host memory for the emulated device is plain host memory, recorded as pinned (storage.py:
    ``is_pinned()`` is True for a pinned copy and its views, False for others). Once PrivateUse1 is the
    current accelerator, DataLoader(pin_memory=True) pins for it, and PyTorch asks PrivateUse1's hooks
    for a pinned allocator, which a Python backend cannot provide; these two CPU kernels answer for it
    and leave every other device to PyTorch's own kernel."""
    library = torch.library.Library("aten", "IMPL")
    for name, emulated in (("_pin_memory", _storage.pin), ("is_pinned", _storage.is_pinned)):
        original = torch.library.get_kernel(f"aten::{name}", "CPU")

        def kernel(keyset: Any, tensor: torch.Tensor, device: Any = None, *, _original: Any = original,
                   _emulated: Any = emulated) -> Any:
            target = torch.accelerator.current_accelerator() if device is None else torch.device(device)
            if target is not None and target.type == backend_name():
                return _emulated(tensor)
            return _original.call_boxed(keyset, tensor, device)

        library.impl(name, kernel, "CPU", with_keyset=True)
    return library


def _copy_kernel(*args: Any, **kwargs: Any) -> Any:
    return _copy_(aten.copy_.default, args, kwargs)


def _item_kernel(tensor: torch.Tensor) -> Any:
    return SPECIAL[aten._local_scalar_dense.default](aten._local_scalar_dense.default, (tensor,), {})


def _overload(name: str) -> Any:
    base, _, overload = name[len("aten::"):].partition(".")
    return getattr(getattr(aten, base), overload or "default")


def _composite_factories() -> list[str]:
    """Aten overloads with no tensor argument that return a tensor and are CompositeExplicitAutograd."""
    names = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or "sparse" in name or \
                not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd"):
            continue
        try:
            schema = _overload(name)._schema
        except AttributeError:
            continue
        if any("Tensor" in str(a.type) for a in schema.arguments):
            continue
        if any("Tensor" in str(r.type) for r in schema.returns):
            names.append(name)
    return names


def _factory_kernel(ovl: Any) -> Callable[..., Any]:
    def factory(*args: Any, **kwargs: Any) -> Any:
        return _factory_fallback(ovl, *args, **kwargs)
    return factory
