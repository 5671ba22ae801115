"""The tensor of an emulated device and its dispatch.

A tensor on ``emu:N`` is an ``EmuTensor``: a wrapper subclass that holds a CPU tensor with its data.
Every aten call on it reaches ``EmuTensor.__torch_dispatch__`` (below autograd, after
CompositeImplicitAutograd ops have decomposed, as on a real backend), which

- raises PyTorch's device-mismatch error when a host tensor (other than a 0-dim scalar) or a tensor of
  another emulated device takes part;
- asks the route table of the emulated description for (op, dtype): native calls run the CPU kernel
  on the held data, other routes go through the same Router as a real dispatch key (a translation
  runs on the wrapped tensors, so its sub-ops are checked too);
- wraps the results (in-place ops return their argument itself; views alias through the CPU data).

The common call (device tensors of one device, scalars, a native route) runs inline in the dispatch
below; every other goes through its plan (dispatch.py), and both unwrap and wrap through wrapping.py.
Ops that need more than unwrap-run-wrap (copies, storage calls, convolutions) are in `SPECIAL`, filled by
the modules that handle them (copies.py, serialization.py, convolution.py).
"""

from __future__ import annotations

import collections
import copy
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..._opnames import canonical_op_name
from ..reference import REFERENCE
from ..table import dtype_name
from . import convolution as _convolution  # noqa: F401  (its SPECIAL handlers)
from . import storage as _storage
from . import wider
from .dispatch import NATIVE_KIND, SPECIAL, _chip_kernel, _dispatch, _plain_kwargs, _plans, _sparse_chip
from .memory import _nbytes
from .slot import backend_name, state
from .wrapping import (
    _NATIVE,
    _REAL_DTYPES,
    _check_outputs,
    _devices,
    _finish,
    _fresh,
    _logical,
    _mismatch,
    _unwrap,
    _wrap,
)

# What the other modules of the emulator import from here (some defined in dispatch.py and wrapping.py)
__all__ = ["SPECIAL", "EmuTensor", "_check_outputs", "_first_device_tensor", "_logical", "_mismatch",
           "_plans", "_sparse_chip", "_unwrap", "_wrap", "never_traced", "on_device_op", "raised",
           "set_device_op_hook", "to_host"]

_TENSOR_DATA = torch._C.TensorBase.data  # PyTorch's own .data descriptor

# Called with (op, arguments) before an op runs on the emulated device while something needs to know
# (streams.py: non-blocking host-to-device copies its stream reaches; profiling.py: the device's kernels
# for a trace); None otherwise, so the dispatch pays one global read. Set through set_device_op_hook.
on_device_op: Callable[[Any, tuple], None] | None = None
_device_op_hooks: dict[str, Callable[[Any, tuple], None]] = {}


def set_device_op_hook(name: str, hook: Callable[[Any, tuple], None] | None) -> None:
    """Install (or, with None, remove) the hook `name` called before each op on the emulated device."""
    global on_device_op
    if hook is None:
        _device_op_hooks.pop(name, None)
    else:
        _device_op_hooks[name] = hook
    hooks = tuple(_device_op_hooks.values())
    if len(hooks) > 1:
        def each(func: Any, args: tuple) -> None:
            for one in hooks:
                one(func, args)

        on_device_op = each
    else:
        on_device_op = hooks[0] if hooks else None

# The last error the device's dispatch raised, per thread: PyTorch's TorchScript interpreter drops the text of an
# exception raised in a Python backend (it reads what() of a python_error it never persisted: "RuntimeError: "
# and nothing), where a real chip's C++ error keeps its text; serialization.py puts it back for script modules.
raised = threading.local()


class EmuTensor(torch.Tensor):
    """A tensor on an emulated device; its data is the CPU tensor ``_data``."""

    _data: torch.Tensor
    _index: int
    # strided and real: what the fast paths of the dispatch take as they are (one attribute read, where
    # .dtype.is_complex and .layout cost ~150 ns each on a wrapper); set wherever the wrapper is made or
    # its data replaced
    _plain: bool

    @staticmethod
    def __new__(cls, data: torch.Tensor, index: int = 0) -> EmuTensor:
        if state.on_first_tensor is not None:
            _first_device_tensor()
        where = _devices.get(index)
        if where is None:
            where = _devices[index] = torch.device(backend_name(), index)
        if data.layout is not torch.strided:  # sparse COO (sparse.py; sparse gradients): no strides
            if data.layout is not torch.sparse_coo:
                raise NotImplementedError(
                    f"a {data.layout} tensor on {where} is not emulated by torch-fl: PyTorch's wrapper tensors "
                    f"(the emulated device's) can carry the strided and sparse_coo layouts only; keep "
                    f"compressed sparse tensors (CSR/CSC/BSR/BSC) on the host, or use sparse_coo")
            out = torch.Tensor._make_wrapper_subclass(cls, data.size(), dtype=data.dtype, layout=data.layout,
                                                      device=where, requires_grad=data.requires_grad)
            out.__dict__.update(_data=data, _index=index, _plain=False)
            return out
        offset = data.storage_offset()
        if offset or data.requires_grad:
            out = torch.Tensor._make_wrapper_subclass(
                cls, data.size(), strides=data.stride(), storage_offset=offset, dtype=data.dtype,
                layout=data.layout, device=where, requires_grad=data.requires_grad)
        else:  # the common case, with PyTorch's defaults left out (each keyword costs ~0.2 us)
            out = torch.Tensor._make_wrapper_subclass(cls, data.size(), strides=data.stride(), dtype=data.dtype,
                                                      device=where)
        # (one __dict__ update, as wrapping._fresh: ~0.8 us less than three attribute sets)
        out.__dict__.update(_data=data, _index=index, _plain=not data.dtype.is_complex)
        return out

    def __init__(self, data: torch.Tensor, index: int = 0) -> None:
        pass

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        state.syncs += 1
        if on_device_op is not None:  # (printing reads the device data: a copy on the current stream)
            on_device_op(None, (self,))
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
            if key not in ("_data", "_index", "_plain"):
                setattr(result, key, copy.deepcopy(value, memo))
        return result

    # No __torch_function__ layer: every call goes straight to the dispatcher (as for a plain tensor).
    __torch_function__ = torch._C._disabled_torch_function_impl

    # ``param.data = t`` replaces the tensor's data in place (PyTorch swaps the TensorImpl's metadata);
    # the held CPU data must follow, or the wrapper would describe one tensor and compute with another.
    @property  # type: ignore[override]
    def data(self) -> torch.Tensor:
        return _TENSOR_DATA.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        if not isinstance(value, EmuTensor) and isinstance(value, torch.Tensor):
            # ``y.data = y.data.cpu()``: PyTorch refuses the swap between a wrapper and a plain tensor
            # ("incompatible tensor type"), a real device allows it: the tensor is swapped (moves.py)
            from .moves import set_data

            set_data(self, value)
            return
        _TENSOR_DATA.__set__(self, value)
        if isinstance(value, EmuTensor):
            self._data = value._data
            self._index = value._index
            self._plain = value._plain

    def tolist(self) -> Any:
        state.syncs += 1
        if on_device_op is not None:  # (a copy to the host on the current stream)
            on_device_op(None, (self,))
        state.d2h_calls += 1
        state.d2h_bytes += _nbytes(self._data)
        return _logical(self).tolist()

    def numpy(self, *, force: bool = False) -> Any:
        if not force:
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
                            f"copy the tensor to host memory first.")
        return self.cpu().numpy()

    # Storage (storage.py): the device storage over the held data, shared by every tensor of that data,
    # made when asked for; data_ptr() is the host address of the data (stable while the tensor lives).
    def untyped_storage(self) -> torch.UntypedStorage:
        return _storage.untyped_storage(self)

    def data_ptr(self) -> int:
        return self._data.data_ptr()

    def is_pinned(self, device: Any = None) -> bool:
        return False  # (device memory is never pinned host memory)

    def __reduce_ex__(self, proto: Any) -> Any:
        # As a tensor of a real device: its device storage (one per allocation, so views and tied
        # weights stay shared in the file), offset, sizes and strides. torch.save copies the storage to
        # the host and tags it 'emu:N'; torch.load restores it with every map_location form
        # (serialization.py) and weights-only loading accepts it.
        if getattr(self, "_is_param", False):  # an nn.Parameter on the device (torch.save(model))
            return (torch._utils._rebuild_parameter,
                    (EmuTensor(self._data.detach(), self._index), self.requires_grad, collections.OrderedDict()))
        if self.layout is not torch.strided:  # sparse gradients: the CPU values and a location tag
            return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                    (self._data.detach(), self.dtype, str(self.device), self.requires_grad))
        if self.is_conj() or self.is_neg():  # lazy complex bits: the values, resolved on the device
            with torch.no_grad():
                resolved = self.resolve_conj().resolve_neg()
            return resolved.requires_grad_(self.requires_grad).__reduce_ex__(proto)
        typed = torch.storage.TypedStorage(wrap_storage=self.untyped_storage(), dtype=self.dtype, _internal=True)
        return (torch._utils._rebuild_tensor_v2,
                (typed, self.storage_offset(), tuple(self.size()), self.stride(), self.requires_grad,
                 collections.OrderedDict()))

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if on_device_op is not None:
            on_device_op(func, args)
        try:
            plan = _plans.get(id(func))
            if plan is not None and plan.fast and args and type(args[0]) is EmuTensor and \
                    (not kwargs or _plain_kwargs(kwargs)):
                # The common call (add, mm, view, add_...): device tensors of one device, scalars and int
                # lists, no tensor keyword, a native route, a real-dtype result. The steps of
                # _dispatch/_finish inlined (each Python call costs ~0.1 us); anything else takes the
                # general path below.
                first = args[0]
                index = first._index
                plain = []
                for arg in args:
                    kind = type(arg)
                    if kind is EmuTensor:
                        if arg._index != index or not arg._plain:
                            break
                        plain.append(arg._data)
                    elif kind is list or kind is tuple:
                        if plan.lists:  # (a tensor list: the general path unwraps and checks it)
                            break
                        plain.append(arg)
                    elif isinstance(arg, torch.Tensor) and (arg.dim() != 0 or arg.device.type != "cpu"):
                        break
                    else:
                        plain.append(arg)
                else:
                    kwargs = kwargs or {}
                    routes = state.routes
                    if state.router is None:
                        route, real = _NATIVE, _REAL_DTYPES
                    else:
                        if plan.routes_of is not routes:
                            plan.routes_of = routes
                            plan.routes = {}
                            if plan.fused:  # (another chip: its own kernel, or PyTorch's composite)
                                kernel = _chip_kernel(plan)
                                plan.call = kernel._op if type(kernel) is torch._ops.OpOverload else kernel
                        held = first._data.dtype  # (the wrapper's own dtype: ~0.1 us more to read)
                        route = plan.routes.get(held)
                        if route is None:
                            dtype = dtype_name(held)
                            route = routes.get((id(func), dtype))
                            if route is None:
                                route = routes[(id(func), dtype)] = state.table.route(plan.name, dtype)
                            plan.routes[held] = route
                        real = state.real_dtypes
                    if route.kind is NATIVE_KIND:
                        out = plan.call(*plain, **kwargs)
                        if type(out) is torch.Tensor and out.dtype in real:
                            written = plan.written
                            if written is not None:
                                if written[0] < len(args):
                                    return args[written[0]]  # add_, mul_...: the argument written
                            elif not plan.view or not torch.is_inference_mode_enabled():
                                return _fresh(out, index)
                        if route is not _NATIVE:
                            _check_outputs(func, route, args, kwargs, out)
                        return _finish(plan, args, kwargs, out, index)
            return _dispatch(func, args, kwargs or {})
        except (RuntimeError, NotImplementedError) as exc:
            if _computed_wider(func, args):  # the chip's kernel takes a dtype the host's refuses
                index, cargs, ckwargs = _unwrap(func, args, kwargs or {})
                out = wider.compute(wider.chip_key(state.description), state.names[func], func, cargs, ckwargs)
                return _wrap(out, index)
            if not _on_engine_thread():
                raised.error = exc
                raise
            return _deferred(exc, func, args, kwargs or {})
        except Exception as exc:
            if not _on_engine_thread():
                raised.error = exc
                raise
            return _deferred(exc, func, args, kwargs or {})


def never_traced(code: Any) -> None:
    """Dynamo runs `code` and every frame it calls as they are, never compiling them. The emulator's kernels
    run below the dispatcher, where Dynamo has nothing to trace (AOTAutograd traces through them at dispatch
    level, which this leaves alone); but in a torch.compile region's eager parts (after a graph break) Dynamo
    would otherwise compile their frames too, and a graph break of its own inside one (an attribute set on
    a new wrapper) resumed with a half-made EmuTensor ('no attribute _index', torch_musa's
    tests/unittest/dynamo/test_ctx_manager.py). A C-level flag per code object: torch._dynamo is not imported."""
    strategy = getattr(torch._C._dynamo.eval_frame, "set_code_exec_strategy", None)
    if strategy is not None:
        skip = torch._C._dynamo.eval_frame._FrameAction.SKIP
        strategy(code, torch._C._dynamo.eval_frame._FrameExecStrategy(skip, skip))


never_traced(EmuTensor.__torch_dispatch__.__func__.__code__)


def _computed_wider(func: Any, args: tuple) -> bool:
    """Whether the emulated chip computes `func` in its first tensor's dtype though the host refused it."""
    desc = state.description
    first = args[0] if args else None
    if desc is None or type(first) is not EmuTensor or state.router is None:
        return False
    name = state.names.get(func)
    if name is None:
        name = state.names[func] = canonical_op_name(func)
    return wider.applies(wider.chip_key(desc), name, dtype_name(first.dtype))


def _first_device_tensor() -> None:
    """Activate the emulated chip's routing at the process's first device tensor (once)."""
    activate, state.on_first_tensor = state.on_first_tensor, None
    if activate is not None:
        activate()


def _on_engine_thread() -> bool:
    """Inside a backward pass the autograd engine runs: on one of its device threads (started by C++), or on
    the calling thread (engine.py runs the emulated devices' backward there), where an exception out of a
    node aborts the process too."""
    return torch._C._current_graph_task_id() != -1


def _deferred(exc: Exception, func: Any, args: tuple, kwargs: dict) -> Any:
    """An error in backward on the engine's device thread aborts the process (PyTorch's engine
    terminates on exceptions from Python backends there); raise it from the end of the backward pass,
    in the thread that called backward, and let this call finish on the CPU meanwhile."""
    def reraise() -> None:
        raise exc

    torch.autograd.Variable._execution_engine.queue_callback(reraise)
    host_args, host_kwargs = to_host((args, kwargs))
    if isinstance(host_kwargs.get("device"), torch.device) and host_kwargs["device"].type != "cpu":
        host_kwargs = {**host_kwargs, "device": torch.device("cpu")}  # a factory: made on the host
    index = next((a._index for a in (*args, *kwargs.values()) if isinstance(a, EmuTensor)), 0)
    try:
        # the CPU kernel, or the reference math of a chip kernel the host lacks
        return _wrap(REFERENCE.get(func, func)(*host_args, **host_kwargs), index)
    except Exception:  # (the host cannot run it either: any escape here aborts the process)
        return _wrap(_placeholder_result(func, host_args, host_kwargs), index)


def _placeholder_result(func: Any, args: tuple, kwargs: dict) -> Any:
    """Zeros shaped as `func`'s result (from its meta kernel), for a backward that only has to reach its
    end, where the error is raised; nothing computed with them is returned to the caller."""
    def to_meta(value: Any) -> Any:
        return value.to("meta") if isinstance(value, torch.Tensor) else value

    try:
        out = func(*tree_map(to_meta, args), **tree_map(to_meta, kwargs))
    except Exception:
        # No meta kernel either (a sparse op the host lacks: gradcheck of sparse erfinv on emu:npu aborted
        # the process here): a zero like the first tensor argument, which only has to reach the end
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        return torch.zeros_like(first) if first is not None else torch.zeros(())
    return tree_map(lambda t: torch.zeros(t.shape, dtype=t.dtype) if isinstance(t, torch.Tensor) else t, out)


state.tensor_type = EmuTensor


def to_host(value: Any) -> Any:
    """The CPU data of every EmuTensor in `value` (a tensor, or a pytree of them), with its lazy
    conjugate/negative bits; aliasing is kept (a device view is a view of the same CPU data)."""
    return tree_map(lambda t: _logical(t) if isinstance(t, EmuTensor) else t, value)
