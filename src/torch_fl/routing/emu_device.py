"""The emulated chip as a device: PyTorch's PrivateUse1 slot borrowed as a Python backend named ``emu``.

A tensor on ``emu:N`` is an ``EmuTensor``: a wrapper subclass that holds a CPU tensor with its data.
Every aten call on it reaches ``EmuTensor.__torch_dispatch__`` (below autograd, after
CompositeImplicitAutograd ops have decomposed, as on a real backend), which

- raises PyTorch's device-mismatch error when a host tensor (other than a 0-dim scalar) or a tensor of
  another emulated device takes part;
- asks the route table of the emulated description for (op, dtype): native calls run the CPU kernel
  on the held data, other routes go through the same Router as a real dispatch key (a translation
  runs on the wrapped tensors, so its sub-ops are checked too);
- wraps the results (in-place ops return their argument itself; views alias through the CPU data).

Calls with no EmuTensor argument but ``device="emu"`` (factories: ``torch.zeros(.., device=d)``) reach
one backend fallback registered on the PrivateUse1 key. Host tensors never reach either: they are
neither routed, counted nor flagged.

PrivateUse1 has one owner per process. When a vendor plugin (torch_npu, ...) owns it, ``emu`` cannot
be a device: emulation then falls back to the dispatch mode of routing/emulation.py, which checks
every CPU op (host work included) and cannot catch forgotten ``.to(device)`` calls; see
``borrowed()`` and ``owner()``.
"""

from __future__ import annotations

import collections
import copy
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..description.probe import canonical_op_name
from .router import first_dtype
from .table import Route, dtype_name

NAME = "emu"
_DEFAULT_NAME = "privateuseone"
_lock = threading.Lock()
aten = torch.ops.aten
_tracked: dict[int, Any] = {}  # data pointer -> weak reference of each storage counted in state.live


class _State:
    """What the emulated devices are: how many, the router that checks them (None: unchecked),
    the per-device memory accounting and the transfer counters."""

    def __init__(self) -> None:
        self.count = 0                 # devices registered (0: the backend is not set up)
        self.router: Any = None        # routing.router.Router of the emulated description, or None
        self.table: Any = None
        self.dtypes: frozenset[str] = frozenset()
        self.torch_dtypes: frozenset[torch.dtype] = frozenset()
        self.description: Any = None   # the description governing emu devices (even when inactive)
        self.routes: dict[tuple[Any, str | None], Route] = {}
        self.names: dict[Any, str] = {}
        self.current = 0
        self.live = [0]                # live bytes per device
        self.peak = [0]
        self.h2d_bytes = self.h2d_calls = self.d2h_bytes = self.d2h_calls = self.syncs = 0
        self.broken = ""               # why the registered backend cannot be used (autograd probe)
        self.probed = False


state = _State()


# --- the backend slot ---------------------------------------------------------------------------------
def owner() -> str:
    """The backend name PrivateUse1 carries now ('privateuseone' when nobody renamed it)."""
    return torch._C._get_privateuse1_backend_name()


def borrowed() -> bool:
    """Whether torch-fl has registered the ``emu`` backend in this process."""
    return state.count > 0


def available() -> bool:
    """Whether ``emu`` can be (or already is) a device: PrivateUse1 is free or already ours, this
    torch has the Python-backend hooks, and autograd can run on it (see `unavailable_reason`)."""
    return not unavailable_reason()


def unavailable_reason() -> str:
    """Why ``emu`` cannot be a device in this process ('' when it can)."""
    from torch.utils import backend_registration

    if state.broken:
        return state.broken
    if owner() not in (_DEFAULT_NAME, NAME) or _vendor_kernels():
        return (f"PyTorch's PrivateUse1 slot belongs to '{owner()}' (a vendor plugin), and a process has "
                f"one PrivateUse1 backend")
    if not hasattr(backend_registration, "_setup_privateuseone_for_python_backend"):
        return f"torch {torch.__version__} has no Python backend hooks (torch >= 2.5 has)"
    return ""


def _vendor_kernels() -> bool:
    """A C++ plugin that registered PrivateUse1 kernels without renaming the slot still owns it."""
    if borrowed():
        return False
    return torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", "PrivateUse1")


def status() -> dict[str, Any]:
    """Which emulator this process uses, for `torchfl doctor`: the emulated device ('device': PrivateUse1
    borrowed as 'emu'), the dispatch-mode fallback ('dispatch mode', and why), or none."""
    emulating = state.router is not None or state.count > 0
    reason = unavailable_reason()
    if state.count and not reason:
        kind = "device"
        detail = (f"PyTorch's PrivateUse1 slot is borrowed as '{NAME}' ({state.count} device(s): "
                  + ", ".join(f"{NAME}:{i}" for i in range(state.count)) + "); host tensors are never checked")
    elif reason:
        kind = "dispatch mode"
        detail = f"the emulated device is unavailable because {reason}; every CPU op of an emulated block is checked"
    else:
        kind, detail = "", "no emulated chip in this process"
    return {"active": emulating, "emulator": kind, "privateuse1": owner(), "borrowed": borrowed(),
            "devices": state.count, "chip": getattr(state.description, "name", ""), "detail": detail}


def ensure(count: int) -> None:
    """Register the ``emu`` backend (once: PyTorch cannot unregister a backend) with `count` devices
    (FL_EMU_DEVICES; a later call sets the count again)."""
    with _lock:
        if state.count == count and state.probed:
            return
        if not borrowed():
            from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

            _setup_privateuseone_for_python_backend(NAME, backend_module=_BackendModule(),
                                                    hook=_make_hook(), device_guard=_make_guard())
            _register_factories()
            _register_serialization()
            _register_generator()
            from . import emu_autocast

            emu_autocast.register(NAME)
        state.count = count
        state.live += [0] * max(0, count - len(state.live))
        state.peak += [0] * max(0, count - len(state.peak))
        if not state.probed and not _torch_importing():
            # (while torch itself imports, FL_CUDA_ALIAS's autoload hook: no backward can have run yet, and
            # a backward would deadlock on the import lock; the next resolution probes)
            state.probed = True
            _probe_autograd()


def _torch_importing() -> bool:
    return bool(getattr(getattr(torch, "__spec__", None), "_initializing", False))


def _probe_autograd() -> None:
    """PyTorch's autograd engine sizes its per-device queues once, at the first backward pass of the
    process; a backend registered after that cannot run backward. One tiny backward tells."""
    probe = torch.ones(1, device=device(0), requires_grad=True)
    try:
        (probe * 2).sum().backward()
    except RuntimeError as exc:
        if "device_ready_queues_" not in str(exc):
            raise
        state.broken = ("a backward pass ran in this process before the emulated device was registered, "
                        "and PyTorch's autograd engine fixes its devices at the first backward. Set "
                        "FL_DEVICE=emu:NAME in the environment (torch-fl then registers the device at "
                        "import), or resolve the emulated device before any backward")


def device(index: int = 0) -> torch.device:
    return torch.device(NAME, index)


def set_router(router: Any) -> None:
    """Check emulated devices against `router`'s description (None: run them unchecked)."""
    state.router = router
    state.routes = {}
    if router is not None:
        state.table = router.table
        state.description = router.table.description
        state.dtypes = frozenset(router.table.description.dtypes)
        state.torch_dtypes = frozenset(getattr(torch, n) for n in state.dtypes if hasattr(torch, n))
        # torch.autocast("emu") without dtype= takes the chip's dtype, as autocast on the real chip would
        torch.set_autocast_dtype(NAME, getattr(torch, router.table.description.autocast_dtype))
    else:
        state.table = None


class DeviceEmulation:
    """An activation of emulated devices: their router; `remove()` restores the previous one (nesting)."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self._previous: Any = None

    def install(self) -> DeviceEmulation:
        self._previous = state.router
        set_router(self.router)
        return self

    def remove(self) -> None:
        set_router(self._previous)


# --- the tensor ----------------------------------------------------------------------------------------
class EmuTensor(torch.Tensor):
    """A tensor on an emulated device; its data is the CPU tensor ``_data``."""

    _data: torch.Tensor
    _index: int

    @staticmethod
    def __new__(cls, data: torch.Tensor, index: int = 0) -> EmuTensor:
        out = torch.Tensor._make_wrapper_subclass(
            cls, data.size(), strides=data.stride(), storage_offset=data.storage_offset(),
            dtype=data.dtype, layout=data.layout, device=torch.device(NAME, index),
            requires_grad=data.requires_grad)
        out._data = data
        out._index = index
        return out

    def __init__(self, data: torch.Tensor, index: int = 0) -> None:
        pass

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        state.syncs += 1
        text = repr(_logical(self).detach())
        return text[:-1] + f", device='{self.device}')" if text.endswith(")") else text

    # A traceable wrapper subclass: module.to() swaps such tensors into the existing Parameter objects
    # (torch.utils.swap_tensors), as param.data = ... does on a real device, so tied weights stay tied.
    def __tensor_flatten__(self) -> tuple[list[str], int]:
        return ["_data"], self._index

    @staticmethod
    def __tensor_unflatten__(inner: dict, index: int, outer_size: Any, outer_stride: Any) -> EmuTensor:
        return EmuTensor(inner["_data"], index)

    def __deepcopy__(self, memo: dict) -> EmuTensor:
        """A copy on the same device; a Parameter copies as nn.Parameter does (without its .grad)."""
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            result = _wrap(self._data.clone(memory_format=torch.preserve_format), self._index)
        result.requires_grad_(self.requires_grad)
        memo[id(self)] = result
        is_param = getattr(self, "_is_param", False)
        if self.grad is not None and not is_param:
            result.grad = copy.deepcopy(self.grad, memo)
        for key, value in self.__dict__.items():
            if key not in ("_data", "_index"):
                setattr(result, key, copy.deepcopy(value, memo))
        return result

    # No __torch_function__ layer: every call goes straight to the dispatcher (as for a plain tensor).
    __torch_function__ = torch._C._disabled_torch_function_impl

    def tolist(self) -> Any:
        state.syncs += 1
        state.d2h_calls += 1
        state.d2h_bytes += _nbytes(self._data)
        return _logical(self).tolist()

    def numpy(self, *, force: bool = False) -> Any:
        if not force:
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
                            f"copy the tensor to host memory first.")
        return self.cpu().numpy()

    def __reduce_ex__(self, proto: Any) -> Any:
        # A tensor of a storage-less PrivateUse1 backend: PyTorch saves its CPU copy and a location
        # tag, and restores it with map_location honored (weights-only loading accepts both).
        if getattr(self, "_is_param", False):  # an nn.Parameter on the device (torch.save(model))
            return (torch._utils._rebuild_parameter,
                    (EmuTensor(self._data.detach(), self._index), self.requires_grad, collections.OrderedDict()))
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (self._data.detach(), self.dtype, str(self.device), self.requires_grad))

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        try:
            return _dispatch(func, args, kwargs or {})
        except Exception as exc:
            if not _on_engine_thread():
                raise
            return _deferred(exc, func, args, kwargs or {})


def _on_engine_thread() -> bool:
    """Inside a backward pass, on one of the autograd engine's device threads (started by C++)."""
    return torch._C._current_graph_task_id() != -1 and \
        isinstance(threading.current_thread(), threading._DummyThread)


def _deferred(exc: Exception, func: Any, args: tuple, kwargs: dict) -> Any:
    """An error in backward on the engine's device thread aborts the process (PyTorch's engine
    terminates on exceptions from Python backends there); raise it from the end of the backward pass,
    in the thread that called backward, and let this call finish on the CPU meanwhile."""
    def reraise() -> None:
        raise exc

    torch.autograd.Variable._execution_engine.queue_callback(reraise)
    data = to_host((args, kwargs))
    index = next((a._index for a in (*args, *kwargs.values()) if isinstance(a, EmuTensor)), 0)
    return _wrap(func(*data[0], **data[1]), index)


def _mismatch(func: Any, first: torch.device, other: torch.device) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {first} and "
        f"{other}! (when checking argument for {canonical_op_name(func)}; torch-fl emulates '{first}' as "
        f"a device of its own: move the tensor with .to(device) as you would on the real chip)")


def _unwrap(func: Any, args: tuple, kwargs: dict) -> tuple[int, tuple, dict]:
    """The device index and the arguments with every EmuTensor replaced by its data; raises on a host
    tensor (other than a 0-dim scalar, or an index tensor of an indexing op, both of which PyTorch
    accepts on its accelerators) or a tensor of another emulated device."""
    # The common call: positional tensors and scalars of real dtypes, no lists, no keywords.
    if not kwargs:
        index = -1
        plain = []
        for arg in args:
            kind = type(arg)
            if kind is EmuTensor:
                if arg.dtype.is_complex:
                    break
                if index < 0:
                    index = arg._index
                elif arg._index != index:
                    break
                plain.append(arg._data)
            elif kind is list or kind is tuple or (isinstance(arg, torch.Tensor) and arg.dim() != 0):
                break
            else:
                plain.append(arg)
        else:
            return index, tuple(plain), kwargs
    return _unwrap_all(func, args, kwargs)


def _unwrap_all(func: Any, args: tuple, kwargs: dict) -> tuple[int, tuple, dict]:
    index = -1
    host: torch.Tensor | None = None
    host_indices = func in _HOST_INDICES

    def one(value: Any, in_list: bool = False) -> Any:
        nonlocal index, host
        if isinstance(value, EmuTensor):
            if index < 0:
                index = value._index
            elif value._index != index:
                raise _mismatch(func, device(index), value.device)
            # complex: the kernel sees the lazy bits as the CPU would (conj-aware ops: clone, copy_), except
            # a view, which views raw memory and keeps the bits on the wrapper (_wrap_bits)
            return _logical(value) if value.dtype.is_complex and not _is_view(func) else value._data
        if isinstance(value, torch.Tensor) and value.dim() != 0 and host is None and \
                not (in_list and host_indices):
            host = value
        return value

    def value(arg: Any) -> Any:
        if isinstance(arg, list):
            return [one(a, True) for a in arg]
        if isinstance(arg, tuple):
            return tuple(one(a, True) for a in arg)
        return one(arg)

    new_args = tuple(value(arg) for arg in args)
    new_kwargs = {k: value(v) for k, v in kwargs.items()} if kwargs else kwargs
    if host is not None:
        raise _mismatch(func, device(index), host.device)
    return index, new_args, new_kwargs


# x_device[host_index] works on PyTorch's accelerators (the indices are copied over).
_HOST_INDICES = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                 aten._index_put_impl_.default, aten._unsafe_index.Tensor, aten._unsafe_index_put.default}


def _wrap(out: Any, index: int) -> Any:
    if isinstance(out, torch.Tensor):
        if isinstance(out, EmuTensor):
            return out
        if out._base is None and type(out) is torch.Tensor:  # (not a FakeTensor under torch.compile)
            _allocated(out, index)
        return EmuTensor(out, index)
    if isinstance(out, (list, tuple)):
        return type(out)(_wrap(o, index) for o in out) if isinstance(out, list) else \
            tuple(_wrap(o, index) for o in out)
    return out


def _inplace_result(func: Any, args: tuple, kwargs: dict, out: Any) -> Any:
    """For ops that write an argument and return it (add_, copy_, out=): that very argument."""
    written = _written.get(func, _UNKNOWN)
    if written is _UNKNOWN:
        written = _written[func] = _written_argument(func)
    if written is None:
        return None
    position, name = written
    return args[position] if position < len(args) else kwargs[name]


_UNKNOWN: Any = object()
_written: dict[Any, tuple[int, str] | None] = {}


def _written_argument(func: Any) -> tuple[int, str] | None:
    """(position, name) of the argument a single-result op writes and returns, else None."""
    returns = func._schema.returns
    if len(returns) != 1 or returns[0].alias_info is None or not returns[0].alias_info.is_write:
        return None
    for i, argument in enumerate(func._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            return i, argument.name
    return None


def _dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    special = _SPECIAL.get(func)
    if special is not None:
        return special(func, args, kwargs)
    index, cargs, ckwargs = _unwrap(func, args, kwargs)
    router = state.router
    if router is None:
        return _finish(func, args, kwargs, func(*cargs, **ckwargs), index)
    dtype = first_dtype(cargs, ckwargs)
    route = state.routes.get((func, dtype))
    if route is None:
        op = state.names.get(func)
        if op is None:
            op = state.names[func] = canonical_op_name(func)
        route = state.routes[(func, dtype)] = state.table.route(op, dtype)
    if route.kind == "native":
        out = func(*cargs, **ckwargs)
        _check_outputs(func, route, args, kwargs, out)
        return _finish(func, args, kwargs, out, index)
    op = state.names[func]

    def native(_a: tuple, _k: dict) -> Any:
        return _finish(func, args, kwargs, func(*cargs, **ckwargs), index)

    return router.call(op, func, route, dtype, args, kwargs, native=native)


def _finish(func: Any, args: tuple, kwargs: dict, out: Any, index: int) -> Any:
    same = _inplace_result(func, args, kwargs, out)
    if same is not None:
        return same
    if isinstance(out, torch.Tensor) and out.dtype.is_complex:
        return _wrap_bits(func, args, out, max(index, 0))
    return _wrap(out, max(index, 0))


_views: dict[Any, bool] = {}


def _is_view(func: Any) -> bool:
    view = _views.get(func)
    if view is None:
        returns = func._schema.returns
        view = _views[func] = bool(returns) and returns[0].alias_info is not None and \
            not returns[0].alias_info.is_write
    return view


def _wrap_bits(func: Any, args: tuple, out: torch.Tensor, index: int) -> EmuTensor:
    """Complex results: the lazy conjugate/negative bits live on the wrapper, never on the data.
    PyTorch resolves those bits above the Python key, so kernels here see raw memory, as a real
    backend's kernels do; a view keeps the bits of the tensor it views, and _conj/_neg_view toggle them."""
    conj, neg = out.is_conj(), out.is_neg()
    raw = out.conj() if conj else out
    raw = torch._neg_view(raw) if neg else raw
    if _is_view(func):
        base = next((a for a in args if isinstance(a, EmuTensor)), None)
        if base is not None:
            conj, neg = conj ^ base.is_conj(), neg ^ base.is_neg()
    wrapped = _wrap(raw, index)
    if conj:
        torch._C._set_conj(wrapped, True)
    if neg:
        torch._C._set_neg(wrapped, True)
    return wrapped


def _logical(t: EmuTensor) -> torch.Tensor:
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
    if type(out) is torch.Tensor:
        if out.dtype in state.torch_dtypes:
            return
        out = (out,)
    for value in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(value, torch.Tensor) and dtype_name(value.dtype) not in state.dtypes:
            raise state.router.error(
                state.names[func], args, kwargs, Route("unsupported", route.source),
                f"it produces {dtype_name(value.dtype)}, which is not in precision.dtypes")


# --- memory -------------------------------------------------------------------------------------------
def _allocated(data: torch.Tensor, index: int) -> None:
    """Count a new storage as live on `index` until PyTorch frees it (its Python storage object lives as
    long as the storage)."""
    storage = data.untyped_storage()
    size = storage.nbytes()
    key = storage.data_ptr()
    if not size or key in _tracked:
        return
    _tracked[key] = weakref.ref(storage, lambda _ref: _freed(key, index, size))
    live = state.live
    live[index] += size
    if live[index] > state.peak[index]:
        state.peak[index] = live[index]


def _freed(key: int, index: int, size: int) -> None:
    _tracked.pop(key, None)
    state.live[index] -= size


def memory_allocated(index: int) -> int:
    """Bytes of live tensor storage on emu:`index`."""
    return state.live[index] if index < len(state.live) else 0


def max_memory_allocated(index: int) -> int:
    return state.peak[index] if index < len(state.peak) else 0


def reset_peak_memory_stats(index: int) -> None:
    if index < len(state.peak):
        state.peak[index] = state.live[index]


def transfers() -> dict[str, int]:
    """Host-device copies and syncs so far on the emulated devices."""
    return {"h2d_bytes": state.h2d_bytes, "h2d_calls": state.h2d_calls, "d2h_bytes": state.d2h_bytes,
            "d2h_calls": state.d2h_calls, "syncs": state.syncs}


def reset_transfers() -> None:
    state.h2d_bytes = state.h2d_calls = state.d2h_bytes = state.d2h_calls = state.syncs = 0


# --- copies between host and device, and syncs ---------------------------------------------------------
def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _copy_(func: Any, args: tuple, kwargs: dict) -> Any:
    dst, src = args[0], args[1]
    rest = args[2:]
    if isinstance(dst, EmuTensor):
        if isinstance(src, EmuTensor):
            dst._data.copy_(src._data, *rest, **kwargs)
        else:
            if src.device.type == "cpu" and src.dim() != 0:
                state.h2d_bytes += _nbytes(src)
                state.h2d_calls += 1
            dst._data.copy_(src, *rest, **kwargs)
        return dst
    # a host (or other device) tensor receives device data
    state.d2h_bytes += _nbytes(src._data)
    state.d2h_calls += 1
    dst.copy_(_logical(src), *rest, **kwargs)
    return dst


def _to_copy(func: Any, args: tuple, kwargs: dict) -> Any:
    src = args[0]
    target = kwargs.get("device")
    cpu_kwargs = dict(kwargs)
    cpu_kwargs.pop("device", None)
    data = _logical(src) if isinstance(src, EmuTensor) else src
    if target is not None and target.type != NAME:
        # device -> host (or another backend): a device-to-host copy, a sync
        state.d2h_bytes += _nbytes(data)
        state.d2h_calls += 1
        state.syncs += 1
        return func(data, **cpu_kwargs).to(target)
    index = target.index if target is not None and target.index is not None else \
        (src._index if isinstance(src, EmuTensor) else state.current)
    if index >= state.count:
        raise _no_device(index)
    if not isinstance(src, EmuTensor):
        state.h2d_bytes += _nbytes(data)
        state.h2d_calls += 1
    _check_dtype_conversion(func, args, kwargs, cpu_kwargs.get("dtype") or data.dtype)
    out = func(data, **cpu_kwargs)
    if out is data:
        out = out.clone()  # _to_copy always copies
    return _wrap(out, index)


def _check_dtype_conversion(func: Any, args: tuple, kwargs: dict, dtype: Any) -> None:
    if state.router is None or dtype_name(dtype) in state.dtypes:
        return
    raise state.router.error("aten::_to_copy.default", args, kwargs,
                             Route("unsupported", "precision.dtypes"),
                             f"it produces {dtype_name(dtype)}, which is not in precision.dtypes")


def _item(func: Any, args: tuple, kwargs: dict) -> Any:
    state.syncs += 1
    return func(args[0]._data, *args[1:], **kwargs)


def _no_device(index: int) -> RuntimeError:
    return RuntimeError(
        f"emu:{index} does not exist: {state.count} emulated device(s) (emu:0..emu:{state.count - 1}). "
        f"Set FL_EMU_DEVICES={index + 1} for more.")


def _sdp_choice(func: Any, args: tuple, kwargs: dict) -> int:
    """SDPA asks the device which fused kernel to use; the CPU's answer names CPU-only kernels (the CPU
    flash attention, whose backward no other chip has): an emulated chip takes the math path, as a chip
    without a fused kernel of its own does."""
    from torch.nn.attention import SDPBackend

    return int(SDPBackend.MATH)


_SPECIAL: dict[Any, Callable[[Any, tuple, dict], Any]] = {
    aten._fused_sdp_choice.default: _sdp_choice,
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _item,
}


# --- factories: calls with device="emu" and no EmuTensor argument --------------------------------------
def _factory_fallback(ovl: Any, *args: Any, **kwargs: Any) -> Any:
    target = kwargs.get("device")
    index = state.current if target is None or target.index is None else target.index
    if index >= state.count:
        raise _no_device(index)
    cpu_kwargs = dict(kwargs)
    if "device" in cpu_kwargs:
        cpu_kwargs["device"] = torch.device("cpu")
    if cpu_kwargs.get("pin_memory"):
        cpu_kwargs["pin_memory"] = False
    router = state.router
    if router is None or _empty(ovl, args):
        # unchecked, or a placeholder of no elements (batch_norm's uint8 reserve of size 0): no chip
        # needs a kernel or a dtype for it
        return _wrap(ovl(*args, **cpu_kwargs), index)
    dtype = first_dtype(args, cpu_kwargs)
    op = state.names.get(ovl)
    if op is None:
        op = state.names[ovl] = canonical_op_name(ovl)
    if dtype is not None and dtype not in state.dtypes:
        # a tensor the chip cannot hold: fail at its creation, as the chip does
        raise router.error(op, args, kwargs, Route("unsupported", "precision.dtypes"),
                           f"it produces {dtype}, which is not in precision.dtypes")
    route = state.routes.get((ovl, dtype))
    if route is None:
        route = state.routes[(ovl, dtype)] = state.table.route(op, dtype)
    if route.kind == "native":
        out = ovl(*args, **cpu_kwargs)
        _check_outputs(ovl, route, args, kwargs, out)
        return _wrap(out, index)
    return router.call(op, ovl, route, dtype, args, kwargs,
                       native=lambda a, k: _wrap(ovl(*args, **cpu_kwargs), index))


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
    per_op = torch.library.Library("aten", "IMPL")
    # torch.tensor(data, device=d) copies into the new device tensor with the Python key excluded: the
    # call reaches PrivateUse1 itself, where PyTorch's Python fallback cannot serve it (a per-op kernel can)
    per_op.impl("copy_", _copy_kernel, "PrivateUse1")
    for name in _composite_factories():
        ovl = _overload(name)
        per_op.impl(name[len("aten::"):], _factory_kernel(ovl), "PrivateUse1")
    _libraries.extend((library, per_op, _pinning()))


def _pinning() -> Any:
    """Pinned host memory for the emulated device is plain host memory. Once PrivateUse1 is the current
    accelerator, DataLoader(pin_memory=True) pins for it, and PyTorch asks PrivateUse1's hooks for a
    pinned allocator, which a Python backend cannot provide; these two CPU kernels answer for it and
    leave every other device to PyTorch's own kernel."""
    library = torch.library.Library("aten", "IMPL")
    for name, emulated in (("_pin_memory", lambda t: t.clone()), ("is_pinned", lambda t: False)):
        original = torch.library.get_kernel(f"aten::{name}", "CPU")

        def kernel(keyset: Any, tensor: torch.Tensor, device: Any = None, *, _original: Any = original,
                   _emulated: Any = emulated) -> Any:
            target = torch.accelerator.current_accelerator() if device is None else torch.device(device)
            if target is not None and target.type == NAME:
                return _emulated(tensor)
            return _original.call_boxed(keyset, tensor, device)

        library.impl(name, kernel, "CPU", with_keyset=True)
    return library


def _copy_kernel(*args: Any, **kwargs: Any) -> Any:
    return _copy_(aten.copy_.default, args, kwargs)


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


# --- torch.save / torch.load(map_location="emu") -------------------------------------------------------
def _register_serialization() -> None:
    """map_location="emu" for checkpoints saved from host tensors: PyTorch's PrivateUse1 deserializer
    would allocate an untyped storage on the device, which a Python backend has none of."""
    from torch import serialization

    def tag(obj: Any) -> str | None:
        return None

    def restore(obj: Any, location: str) -> Any:
        if location == NAME or location.startswith(NAME + ":"):
            return _device_storage(obj, torch.device(location))
        return None

    serialization.register_package(19, tag, restore)


def _device_storage(host: Any, where: torch.device) -> Any:
    """A storage that says it is on `where` and points at `host`'s memory (kept alive as `_host`):
    torch._utils._rebuild_tensor then builds ``torch.empty(0, device=where).set_(storage, ...)``, which
    `_set_storage` turns into an EmuTensor over `host`."""
    host = getattr(host, "_untyped_storage", host)
    if where.index is None:
        where = device(state.current)
    if where.index >= state.count:
        raise _no_device(where.index)
    storage = torch._C._construct_storage_from_data_pointer(host.data_ptr(), where, host.nbytes())
    storage._host = host
    state.h2d_bytes += host.nbytes()
    state.h2d_calls += 1
    return storage


def _set_storage(func: Any, args: tuple, kwargs: dict) -> Any:
    self = args[0]
    source = args[1]
    if isinstance(source, EmuTensor):
        self._data.set_(source._data, *args[2:], **kwargs)
        return self
    if isinstance(source, torch.Tensor):
        raise _mismatch(func, self.device, source.device)
    host = getattr(source, "_host", None)
    if host is None:
        if source.device.type != "cpu":
            raise _mismatch(func, self.device, source.device)
        raise RuntimeError(f"set_: {self.device} tensors cannot use a cpu storage; copy the data with "
                           f".to('{self.device}')")
    self._data.set_(host, *args[2:], **kwargs)
    return self


for _op in (aten.set_.source_Storage, aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor,
            aten.set_.source_Tensor_storage_offset):
    _SPECIAL[_op] = _set_storage


def _set_empty(func: Any, args: tuple, kwargs: dict) -> Any:
    args[0]._data.set_()
    return args[0]


_SPECIAL[aten.set_.default] = _set_empty


# --- the backend module (torch.emu), hooks and device guard ----------------------------------------------
class _BackendModule:
    """``torch.emu``: what PyTorch asks a backend module for (device count, amp dtypes, seeding)."""

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def current_device() -> int:
        return state.current

    @staticmethod
    def set_device(index: int | torch.device) -> None:
        state.current = index.index or 0 if isinstance(index, torch.device) else int(index)

    @staticmethod
    def device_count() -> int:
        return state.count

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        pass  # device randomness is the CPU generator's (seeded by torch.manual_seed)

    @staticmethod
    def manual_seed(seed: int) -> None:
        pass

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(new_state)

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        desc = state.description
        names = desc.dtypes if desc is not None else ("float16", "bfloat16")
        return [getattr(torch, n) for n in names if n in ("float16", "bfloat16")]

    @staticmethod
    def synchronize(device: Any = None) -> None:
        state.syncs += 1

    # What torch.fl.memory_allocated() and friends report on the emulated device: its live tensor bytes.
    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return memory_allocated(_index_of(device))

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return max_memory_allocated(_index_of(device))

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        reset_peak_memory_stats(_index_of(device))

    @staticmethod
    def empty_cache() -> None:
        pass  # nothing is cached: freed device tensors return their host memory at once

    class device:  # torch.emu.device(i), the context manager PyTorch uses
        def __init__(self, where: Any) -> None:
            self.index = torch.device(where).index if not isinstance(where, int) else where
            self.prev = 0

        def __enter__(self) -> None:
            self.prev = state.current
            if self.index is not None:
                state.current = self.index

        def __exit__(self, *exc: Any) -> None:
            state.current = self.prev


def _index_of(where: Any) -> int:
    if where is None:
        return state.current
    if isinstance(where, int):
        return where
    index = torch.device(where).index
    return state.current if index is None else index


def _make_hook() -> Any:
    # PyTorch binds only these three hooks for Python backends (no generator hook: see Generator below).
    class Hook(torch._C._acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            return True

        def has_primary_context(self, dev_id: int) -> bool:
            return True

        def is_built(self) -> bool:
            return True

    return Hook()


def _make_guard() -> Any:
    # Only type_ is bound for Python guards: PyTorch counts one device (see docs/routing.md, several
    # emulated devices, for what that means for backward on emu:1 and above).
    class Guard(torch._C._acc.DeviceGuard):
        def type_(self) -> Any:
            return torch._C._autograd.DeviceType.PrivateUse1

    return Guard()


# --- torch.Generator(device="emu") ------------------------------------------------------------------------
class _GeneratorMeta(type(torch.Generator)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _HostGenerator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _HostGenerator)


_HostGenerator: Any = torch.Generator


class _EmuGenerator(torch.Generator):
    """A generator of an emulated device: the CPU generator algorithm (the data lives on the host),
    reporting its device as the emulated one."""

    _emu_device: torch.device

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self._emu_device


class Generator(torch.Generator, metaclass=_GeneratorMeta):
    """``torch.Generator`` once the emu backend is registered: ``torch.Generator(device="emu")`` gives
    an emulated device's generator (PyTorch's PrivateUse1 hooks cannot create one from Python); every
    other device gets PyTorch's own generator, and isinstance checks see PyTorch's class."""

    def __new__(cls, device: Any = "cpu") -> Any:  # type: ignore[misc]
        where = torch.device(device) if not isinstance(device, int) else torch.device(NAME, device)
        if where.type != NAME:
            return _HostGenerator(where)
        index = state.current if where.index is None else where.index
        if index >= state.count:
            raise _no_device(index)
        generator = _EmuGenerator()
        generator._emu_device = torch.device(NAME, index)
        return generator


def _register_generator() -> None:
    torch.Generator = Generator  # type: ignore[misc]


def to_host(value: Any) -> Any:
    """The CPU data of every EmuTensor in `value` (a tensor, or a pytree of them), with its lazy
    conjugate/negative bits; aliasing is kept (a device view is a view of the same CPU data)."""
    return tree_map(lambda t: _logical(t) if isinstance(t, EmuTensor) else t, value)
