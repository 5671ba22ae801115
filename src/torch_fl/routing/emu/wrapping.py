"""Arguments in and results out of the emulated device's dispatch (tensor.py).

In: `_unwrap` gives the CPU data of every device tensor of a call, and raises PyTorch's device-mismatch
error where a host tensor (other than a 0-dim scalar) or a tensor of another emulated device takes part.
Out: `_wrap` makes device tensors of a kernel's results (counted as device memory, memory.py), `_finish`
returns the very argument an in-place or out= op wrote and keeps the lazy conjugate/negative bits of a
complex result on its wrapper, and `_check_outputs` refuses a result dtype the chip lacks.

The device tensor type is ``state.tensor_type`` (tensor.py's EmuTensor, which sets it: this module is
below it, and the dispatch there imports this one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.utils._mode_utils import no_dispatch

from ..._names import RouteKind
from ..._opnames import canonical_op_name
from ..table import Route, foreign_output_dtype
from . import storage as _storage
from .memory import _allocated
from .slot import backend_name, device, state

if TYPE_CHECKING:
    from .dispatch import _Plan

aten = torch.ops.aten

# (the route of the fast path where no router checks the device; its result dtypes: any but complex)
_NATIVE = Route(RouteKind.NATIVE, "no router: emulated devices run unchecked")
_REAL_DTYPES = frozenset(v for v in vars(torch).values() if isinstance(v, torch.dtype) and not v.is_complex)


def _mismatch(func: Any, first: torch.device, other: torch.device) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {first} and "
        f"{other}! (when checking argument for {canonical_op_name(func)}; torch-fl emulates '{first}' as "
        f"a device of its own: move the tensor with .to(device) as you would on the real chip)")


def _unwrap(func: Any, args: tuple, kwargs: dict) -> tuple[int, tuple, dict]:
    """The device index and the arguments with every EmuTensor replaced by its data; raises on a host
    tensor (other than a 0-dim scalar, or an index tensor of an indexing op, both of which PyTorch
    accepts on its accelerators) or a tensor of another emulated device."""
    # The common call: positional tensors, scalars and lists of either, real dtypes, no keywords.
    if not kwargs:
        emu = state.tensor_type
        index = -1
        plain = []
        for arg in args:
            kind = type(arg)
            if kind is emu:
                if not arg._plain:
                    break
                if index < 0:
                    index = arg._index
                elif arg._index != index:
                    break
                plain.append(arg._data)
            elif kind is list or kind is tuple:
                items = _plain_items(arg, emu, index)
                if items is None:
                    break
                index, data = items
                plain.append(data if kind is list else tuple(data))
            elif isinstance(arg, torch.Tensor) and (arg.dim() != 0 or arg.device.type != "cpu"):
                break
            else:
                plain.append(arg)
        else:
            return index, tuple(plain), kwargs
    return _unwrap_all(func, args, kwargs)


def _plain_items(items: list | tuple, emu: type, index: int) -> tuple[int, list] | None:
    """(device index, data) of a list argument whose tensors are real strided device tensors of device
    `index` (-1: not known yet), its other items (ints, None) as they are; None for anything else (a host
    tensor, a complex or sparse one, another device's: _unwrap_all checks and words those). The tensor lists
    of cat and of the optimizers' _foreach_ ops take this walk."""
    if items and type(items[0]) is emu:  # a tensor list: one comprehension (~2x a loop's speed) when it fits
        if index < 0:
            index = items[0]._index
        data = [item._data for item in items if type(item) is emu and item._plain and item._index == index]
        if len(data) == len(items):
            return index, data
    data = []
    for item in items:
        if type(item) is emu:
            if not item._plain:
                return None
            if index < 0:
                index = item._index
            elif item._index != index:
                return None
            data.append(item._data)
        elif isinstance(item, torch.Tensor):
            return None
        else:
            data.append(item)
    return index, data


def _unwrap_all(func: Any, args: tuple, kwargs: dict) -> tuple[int, tuple, dict]:
    index = -1
    host: torch.Tensor | None = None
    host_indices = func in _HOST_INDICES
    host_ok = _HOST_ARGUMENTS.get(func, ())
    emu = state.tensor_type

    def one(value: Any, in_list: bool = False, on_host: bool = False) -> Any:
        nonlocal index, host
        if isinstance(value, emu):
            if index < 0:
                index = value._index
            elif value._index != index:
                raise _mismatch(func, device(index), value.device)
            # complex: the kernel sees the lazy bits as the CPU would (conj-aware ops: clone, copy_), except
            # a view, which views raw memory and keeps the bits on the wrapper (_wrap_bits)
            return _logical(value) if not value._plain and value.dtype.is_complex and not _is_view(func) \
                else value._data
        if isinstance(value, torch.Tensor) and value.device.type == backend_name():
            # a tensor a factory made on the device while torch.compile traces (a FakeTensor or
            # FunctionalTensor on emu:N, not an EmuTensor): the device tensor it stands for
            where = value.device.index or 0
            if index < 0:
                index = where
            elif where != index:
                raise _mismatch(func, device(index), value.device)
            return _traced_on_host(value)
        if isinstance(value, torch.Tensor) and value.dim() != 0 and host is None and \
                not (in_list and host_indices) and not on_host:
            host = value
        return value

    def value(arg: Any, on_host: bool = False) -> Any:
        if isinstance(arg, list):
            return [one(a, True) for a in arg]
        if isinstance(arg, tuple):
            return tuple(one(a, True) for a in arg)
        return one(arg, on_host=on_host)

    new_args = tuple(value(arg, i in host_ok) for i, arg in enumerate(args))
    new_kwargs = {k: value(v, k in host_ok) for k, v in kwargs.items()} if kwargs else kwargs
    if host is not None:
        raise _mismatch(func, device(index), host.device)
    return index, new_args, new_kwargs


def _traced_on_host(value: torch.Tensor) -> torch.Tensor:
    """The host data of a device tensor made inside a torch.compile trace (FakeTensorMode makes a
    factory's result on emu:N itself, without the device): a copy to the host, recorded in the graph,
    so the compiled code makes the tensor on the device and computes with its data as eager code does."""
    return aten._to_copy.default(value, device=torch.device("cpu"))


# x_device[host_index] works on PyTorch's accelerators (the indices are copied over).
_HOST_INDICES = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                 aten._index_put_impl_.default, aten._unsafe_index.Tensor, aten._unsafe_index_put.default}

# Arguments an accelerator's kernel reads on the host, so a CPU tensor there is accepted as on CUDA (its
# CTC kernels copy input_lengths/target_lengths to the CPU first). By position and by keyword name.
_HOST_ARGUMENTS: dict[Any, frozenset] = {
    aten._ctc_loss.Tensor: frozenset({2, 3, "input_lengths", "target_lengths"}),
    aten._ctc_loss_backward.Tensor: frozenset({3, 4, "input_lengths", "target_lengths"}),
}


def _wrap(out: Any, index: int) -> Any:
    """`out` (a kernel's result: a tensor, or a list or tuple of them) as device tensors on emu:`index`."""
    if isinstance(out, torch.Tensor):
        if type(out) is torch.Tensor:
            return _fresh(out, index)
        emu = state.tensor_type
        # a device tensor already, or a FakeTensor under torch.compile (no memory to count)
        return out if isinstance(out, emu) else emu(out, index)
    if isinstance(out, (list, tuple)):
        return type(out)(_wrap(o, index) for o in out) if isinstance(out, list) else \
            tuple(_wrap(o, index) for o in out)
    return out


# torch.device of each emulated index (the slot's name is fixed before the first tensor exists); EmuTensor's
# constructor fills it, at the index's first tensor
_devices: dict[int, torch.device] = {}
_make_wrapper = torch.Tensor._make_wrapper_subclass


def _fresh(out: torch.Tensor, index: int) -> Any:
    """EmuTensor(out, index) of a kernel's result, a plain CPU tensor: a new storage is counted as device
    memory, a view (view, t, detach) aliases memory its base counts. The common cases (strided, no grad, a
    device that has made its first tensor) are made without the constructor's calls, ~1 us less."""
    if out._base is None:
        _allocated(out, index)
    where = _devices.get(index)
    if where is None or out.layout is not torch.strided or out.requires_grad:
        return state.tensor_type(out, index)
    offset = out.storage_offset()
    new = _make_wrapper(state.tensor_type, out.size(), strides=out.stride(), storage_offset=offset, dtype=out.dtype,
                        device=where) if offset else \
        _make_wrapper(state.tensor_type, out.size(), strides=out.stride(), dtype=out.dtype, device=where)
    # (one update of the new wrapper's __dict__ costs ~0.2 us, three attribute sets ~1 us: these names
    # are plain instance attributes, no descriptor of the class takes them)
    new.__dict__.update(_data=out, _index=index, _plain=not out.dtype.is_complex)
    return new


def _finish(plan: _Plan, args: tuple, kwargs: dict, out: Any, index: int) -> Any:
    """What the call of `plan`'s op returns, its kernel having computed `out` on the data of emu:`index`."""
    written = plan.written
    if written is not None:
        # ops that write an argument and return it (add_, copy_, out=): that very argument
        position, name = written
        same = args[position] if position < len(args) else kwargs[name]
        if plan.metadata:
            if plan.resizes:
                # resize_, as_strided_ (no kernel that runs on metadata alone): the wrapper takes its
                # data's sizes, strides, offset and storage
                _storage.sync(same)
            else:
                # transpose_, squeeze_...: the data changed shape in place, and so must the wrapper
                # (PyTorch's own kernel of the op, run on the wrapper's metadata alone)
                with no_dispatch():
                    plan.func(*args, **kwargs)
        elif type(same) is state.tensor_type and same.shape != same._data.shape:
            _storage.sync(same)  # out=: resized by the kernel, as a real device resizes it
        return same
    if plan.outs is not None:
        # several out= arguments (max(dim, out=(values, indices)), sort, ...): each written (and resized
        # where the kernel resized it), and returned itself
        written = []
        for position, name in plan.outs:
            same = args[position] if position < len(args) else kwargs[name]
            if type(same) is state.tensor_type and same.shape != same._data.shape:
                _storage.sync(same)
            written.append(same)
        return tuple(written)
    if isinstance(out, torch.Tensor) and out.dtype.is_complex:
        return _wrap_bits(plan.func, args, out, max(index, 0))
    if plan.view and torch.is_inference_mode_enabled():
        base = next((a for a in args if isinstance(a, state.tensor_type)), None)
        if base is not None and not base.is_inference():
            # a view of a normal tensor is a normal tensor sharing its version counter, as on any
            # device; a wrapper made under inference mode would be an inference tensor, which has none
            with torch.inference_mode(False):
                return _wrap(out, max(index, 0))
    return _wrap(out, max(index, 0))


_views: dict[Any, bool] = {}


def _is_view(func: Any) -> bool:
    view = _views.get(func)
    if view is None:
        returns = func._schema.returns
        view = _views[func] = bool(returns) and returns[0].alias_info is not None and \
            not returns[0].alias_info.is_write
    return view


def _wrap_bits(func: Any, args: tuple, out: torch.Tensor, index: int) -> torch.Tensor:
    """Complex results: the lazy conjugate/negative bits live on the wrapper, never on the data.
    PyTorch resolves those bits above the Python key, so kernels here see raw memory, as a real
    backend's kernels do; a view keeps the bits of the tensor it views, and _conj/_neg_view toggle them."""
    conj, neg = out.is_conj(), out.is_neg()
    raw = out.conj() if conj else out
    raw = torch._neg_view(raw) if neg else raw
    if _is_view(func):
        base = next((a for a in args if isinstance(a, state.tensor_type)), None)
        if base is not None:
            conj, neg = conj ^ base.is_conj(), neg ^ base.is_neg()
    wrapped = _wrap(raw, index)
    if conj:
        torch._C._set_conj(wrapped, True)
    if neg:
        torch._C._set_neg(wrapped, True)
    return wrapped


def _logical(t: Any) -> torch.Tensor:
    """The CPU data of `t` with its lazy conjugate/negative bits (what its values are)."""
    data = t._data
    if t.is_conj():
        data = data.conj()
    if t.is_neg():
        data = torch._neg_view(data)
    return data


def _check_outputs(func: Any, route: Route, args: tuple, kwargs: dict, out: Any) -> None:
    """A native op can still produce a dtype the chip lacks (rfft: float32 in, complex64 out); on the
    chip that fails here, not at the next op that happens to read the result."""
    kind, dtypes = type(out), state.torch_dtypes
    if kind is torch.Tensor:
        if out.dtype in dtypes:
            return
    elif kind is tuple or kind is list:
        # several results (native_layer_norm, the _foreach_ ops): each of a dtype the chip has, or not a
        # tensor (no dtype to check), so none to name
        for value in out:
            if isinstance(value, torch.Tensor) and (type(value) is not torch.Tensor or value.dtype not in dtypes):
                break
        else:
            return
    produced = foreign_output_dtype(func, out, state.dtypes)
    if produced is not None:
        raise state.router.error(canonical_op_name(func), args, kwargs, Route(RouteKind.UNSUPPORTED, route.source),
                                 f"it produces {produced}, which is not in precision.dtypes")
