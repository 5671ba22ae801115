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

Ops that need more than unwrap-run-wrap (copies, storage calls) are in `SPECIAL`, filled by the modules
that handle them (copies.py, serialization.py).
"""

from __future__ import annotations

import collections
import copy
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._mode_utils import no_dispatch
from torch.utils._pytree import tree_map

from ..._names import RouteKind
from ..._opnames import canonical_op_name
from ..reference import REFERENCE
from ..router import first_dtype
from ..table import Route, dtype_name, foreign_output_dtype
from . import composites, wider
from . import rng as _rng
from . import sparse as _sparse
from . import storage as _storage
from .memory import _allocated, _nbytes
from .slot import backend_name, device, state

# (read on every call: a module global is ~4x faster to read than an Enum member)
NATIVE_KIND = RouteKind.NATIVE

aten = torch.ops.aten
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

# torch.device of each emulated index (the slot's name is fixed before the first tensor exists)
_devices: dict[int, torch.device] = {}


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
            out._data = data
            out._index = index
            out._plain = False
            return out
        offset = data.storage_offset()
        if offset or data.requires_grad:
            out = torch.Tensor._make_wrapper_subclass(
                cls, data.size(), strides=data.stride(), storage_offset=offset, dtype=data.dtype,
                layout=data.layout, device=where, requires_grad=data.requires_grad)
        else:  # the common case, with PyTorch's defaults left out (each keyword costs ~0.2 us)
            out = torch.Tensor._make_wrapper_subclass(cls, data.size(), strides=data.stride(), dtype=data.dtype,
                                                      device=where)
        out._data = data
        out._index = index
        out._plain = not data.dtype.is_complex
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
                        route = plan.routes.get(first.dtype)
                        if route is None:
                            dtype = dtype_name(first.dtype)
                            route = routes.get((id(func), dtype))
                            if route is None:
                                route = routes[(id(func), dtype)] = state.table.route(plan.name, dtype)
                            plan.routes[first.dtype] = route
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
                if not arg._plain:
                    break
                if index < 0:
                    index = arg._index
                elif arg._index != index:
                    break
                plain.append(arg._data)
            elif kind is list or kind is tuple or \
                    (isinstance(arg, torch.Tensor) and (arg.dim() != 0 or arg.device.type != "cpu")):
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
    host_ok = _HOST_ARGUMENTS.get(func, ())

    def one(value: Any, in_list: bool = False, on_host: bool = False) -> Any:
        nonlocal index, host
        if isinstance(value, EmuTensor):
            if index < 0:
                index = value._index
            elif value._index != index:
                raise _mismatch(func, device(index), value.device)
            # complex: the kernel sees the lazy bits as the CPU would (conj-aware ops: clone, copy_), except
            # a view, which views raw memory and keeps the bits on the wrapper (_wrap_bits)
            return _logical(value) if value.dtype.is_complex and not _is_view(func) else value._data
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


def _written_argument(func: Any) -> tuple[int, str] | None:
    """(position, name) of the argument a single-result op writes and returns, else None."""
    returns = func._schema.returns
    if len(returns) != 1 or returns[0].alias_info is None or not returns[0].alias_info.is_write:
        return None
    for i, argument in enumerate(func._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            return i, argument.name
    return None


# resize_as_'s own kernel resizes through the backend (and so through the device's resize_)
_RESIZES = {aten.resize_as_.default}


def _out_arguments(func: Any) -> list[tuple[int, str]] | None:
    """(position, name) of each out= argument of an op that returns several of them, else None."""
    returns = func._schema.returns
    if len(returns) < 2 or not all(r.alias_info is not None and r.alias_info.is_write for r in returns):
        return None
    outs = [(i, a.name) for i, a in enumerate(func._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]
    return outs if len(outs) == len(returns) else None


class _Plan:
    """What the dispatch needs to know about one op, found once: the hot path then makes a single dict
    lookup keyed by the op's id (an OpOverload's own __hash__ is Python code, ~0.5 us a call)."""

    __slots__ = ("call", "fast", "func", "fused", "fused_for", "inherited", "kernel", "lists", "metadata", "name",
                 "outs", "resizes", "routes", "routes_of", "seeded", "special", "view", "written")

    def __init__(self, func: Any) -> None:
        self.func = func  # (holds the op, so its id stays its own)
        self.special = SPECIAL.get(func)
        if self.special is None and _device_kernel_registered(func):
            self.special = _device_kernel
        if self.special is None and _composite(func):
            self.special = _decompose
        # the CPU kernel, or the reference math of a chip kernel the CPU lacks (routing/reference.py)
        self.kernel = REFERENCE.get(func) or composites.HOST.get(func, func)
        # the kernel's C++ entry: OpOverload.__call__ is a Python frame that only calls it (~0.15 us)
        self.call = self.kernel._op if type(self.kernel) is torch._ops.OpOverload else self.kernel
        self.name = canonical_op_name(func)
        self.written = _written_argument(func)
        self.view = _is_view(func)
        self.metadata = torch.Tag.inplace_view in func.tags
        # an in-place change of shape with no kernel that runs on a wrapper's metadata alone
        composite = any(torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)
                        for key in ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"))
        # an in-place view every backend inherits (as_strided_, transpose_, unsqueeze_...: PyTorch's
        # composite kernel, no chip kernel): never asked of the chip's route table
        self.inherited = self.metadata and composite
        self.resizes = self.metadata and (func in _RESIZES or not torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), "CompositeExplicitAutograd"))
        self.outs = _out_arguments(func) if self.written is None else None
        # a random op: it draws from its device's generator, never the host's (rng.py)
        self.seeded = _rng.seeded(func)
        # unwrap-run-wrap (or run and return the argument written) is all this op needs: no handler of
        # its own, no in-place change of shape, no generator to choose
        self.fast = self.special is None and not self.metadata and not self.seeded
        # an argument that is a list of tensors (cat, stack, index): a list argument is then not ints
        self.lists = any(isinstance(a.type, torch.ListType) and not _int_list(a.type)
                         for a in func._schema.arguments)
        # the routes of this op by torch.dtype, for the route table `routes_of` (state.routes: set_router
        # replaces it, and so drops these)
        self.routes: dict[torch.dtype, Route] = {}
        self.routes_of: dict | None = None
        # computed by PyTorch's composite on the host: a chip whose vendor has a kernel of its own rounds
        # half results once (wider.py); the kernel for the chip of `fused_for` (its route table)
        self.fused = self.special is None and self.kernel is func and \
            (wider.host_composite(func) or wider.accumulated(self.name))
        self.fused_for: tuple[Any, Any] | None = None


def _chip_kernel(plan: _Plan) -> Any:
    """`plan`'s kernel on the emulated chip: its vendor's fused kernel (half inputs computed in float32,
    rounded once) where the chip registers one for an op the host composes, else the host's."""
    routes = state.routes
    cached = plan.fused_for
    if cached is not None and cached[0] is routes:
        return cached[1]
    desc = state.description
    once = wider.accumulates_in_float(desc, plan.name) if wider.accumulated(plan.name) else \
        wider.vendor_fused(desc, plan.name)
    kernel = wider.rounding_once(plan.kernel) if once else plan.kernel
    plan.fused_for = (routes, kernel)
    return kernel


_plans: dict[int, _Plan] = {}


def _int_list(kind: Any) -> bool:
    element = kind.getElementType()
    if isinstance(element, torch.OptionalType):
        element = element.getElementType()
    return isinstance(element, (torch.IntType, torch.SymIntType, torch.FloatType, torch.BoolType))


def _plain_kwargs(kwargs: dict) -> bool:
    """Keywords the fast path passes on as they are: no tensor, no list, no device (memory_format=, dim=...)."""
    for value in kwargs.values():
        kind = type(value)
        if kind is list or kind is tuple or kind is torch.device or isinstance(value, torch.Tensor):
            return False
    return True


def _dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    plan = _plans.get(id(func))
    if plan is None:
        plan = _plans[id(func)] = _Plan(func)
    if plan.seeded:
        index = _rng.first_index(args, kwargs, EmuTensor)
        return _rng.call(func, index, lambda kernel, a, k: _dispatch_planned(plan, func, a, k, kernel), args, kwargs,
                         own_kernel=plan.kernel is func and plan.special is None)
    return _dispatch_planned(plan, func, args, kwargs)


def _dispatch_planned(plan: _Plan, func: Any, args: tuple, kwargs: dict, kernel: Any = None) -> Any:
    """The dispatch of `func` once planned; `kernel`: what computes it instead of the plan's own (a random
    op's kernel that takes the device's generator: rng.py)."""
    if kernel is None:
        kernel = plan.kernel if not plan.fused else _chip_kernel(plan)
    if plan.special is not None:
        return plan.special(func, args, kwargs)
    index, cargs, ckwargs = _unwrap(func, args, kwargs)
    target = kwargs.get("device")
    if target is not None and torch.device(target).type != backend_name():
        # empty_like(x, device="cpu"), x.new_zeros(.., device="cpu"): made on the device asked for, as
        # PyTorch makes them (nothing of the emulated chip runs)
        return kernel(*cargs, **ckwargs)
    router = state.router
    if router is None or plan.inherited:
        return _finish(plan, args, kwargs, kernel(*cargs, **ckwargs), index)
    first = args[0] if args else None
    dtype = dtype_name(first.dtype) if type(first) is EmuTensor else first_dtype(cargs, ckwargs)
    sparse = _sparse_key(args, kwargs)
    if sparse is not None:
        chip = _sparse_chip()
        if chip is not None:
            if "device" in ckwargs:  # a sparse factory over device indices and values: made on the host
                ckwargs = {**ckwargs, "device": torch.device("cpu")}
            if not _sparse.registered(chip, sparse, func, plan.name) or (dtype is not None and
                                                                         dtype not in state.dtypes):
                return _sparse_call(plan, func, chip, sparse, dtype, args, kwargs, None, index)
            kernel = chip.reference.get(plan.name, kernel)
            return _sparse_call(plan, func, chip, sparse, dtype, args, kwargs, kernel(*cargs, **ckwargs), index)
    key = (id(func), dtype)
    route = state.routes.get(key)
    if route is None:
        route = state.routes[key] = state.table.route(plan.name, dtype)
    if route.kind is NATIVE_KIND:
        out = kernel(*cargs, **ckwargs)
        _check_outputs(func, route, args, kwargs, out)
        return _finish(plan, args, kwargs, out, index)

    def native(_a: tuple, _k: dict) -> Any:
        return _finish(plan, args, kwargs, kernel(*cargs, **ckwargs), index)

    return router.call(plan.name, func, route, dtype, args, kwargs, native=native)


def _sparse_key(args: tuple, kwargs: dict) -> str | None:
    """The sparse backend key of a call (sparse.COO, sparse.CSR), or None for a dense one: the layout of
    its first sparse device tensor, else of a factory's ``layout=``."""
    for arg in args:
        if type(arg) is EmuTensor:
            if not arg._plain and arg.layout is not torch.strided:
                return _sparse.key_of(arg.layout)
        elif type(arg) is list or type(arg) is tuple:
            for item in arg:
                if type(item) is EmuTensor and not item._plain and item.layout is not torch.strided:
                    return _sparse.key_of(item.layout)
    if kwargs:
        layout = kwargs.get("layout")
        if layout is not None and layout is not torch.strided:
            return _sparse.key_of(layout)
    return None


_sparse_of: list[Any] = [None, None]  # (state.routes, the chip's sparse kernels): set_router replaces routes


def _sparse_chip() -> _sparse.SparseKernels | None:
    """The emulated chip's plugin sparse registrations (sparse.py), None for a chip without such facts."""
    if _sparse_of[0] is not state.routes:
        desc = state.description
        _sparse_of[:] = [state.routes, _sparse.kernels(wider.chip_key(desc)) if desc is not None else None]
    return _sparse_of[1]


def _sparse_call(plan: _Plan, func: Any, chip: _sparse.SparseKernels, key: str, dtype: str | None, args: tuple,
                 kwargs: dict, out: Any, index: int) -> Any:
    """A call on the chip's sparse key: `out` is the host's sparse kernel's result, None where the chip has no
    kernel for the op (its plugin's error) or for the dtype (torch-fl's UnsupportedOperatorError)."""
    if out is None:
        if dtype is not None and dtype not in state.dtypes:
            raise state.router.error(plan.name, args, kwargs, Route(RouteKind.UNSUPPORTED, "precision.dtypes"),
                                     f"{dtype} is not in precision.dtypes")
        raise _sparse.refusal(chip, key, plan.name, backend_name())
    _check_outputs(func, _NATIVE, args, kwargs, out)
    return _finish(plan, args, kwargs, out, index)


def _composite(func: Any) -> bool:
    """A CompositeImplicitAutograd op reaches the device only where autograd is off (inference mode: no
    autograd key decomposes it first). A real backend still runs its composite kernel, and so does this
    one: ``x.to("cpu")`` copies to the host, views keep their version counter. (The ops of composites.py, which
    chips also have kernels of, reach the device only where the chip has the kernel: they run it.)"""
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd") and \
        func.name().removeprefix("aten::") not in composites.OPS


# PyTorch's own namespaces: their PrivateUse1 kernels are the emulator's (factories.py), never a user's
_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d", "_quantized", "quantized"})
_PRIVATEUSE1 = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)


def _device_kernel_registered(func: Any) -> bool:
    """A kernel of an op of a library of its own registered for the device's key (``torch.library.Library(ns,
    "DEF").impl(name, fn, "PrivateUse1")``, or the vendor's key name, as torch_musa's tests/unittest/miscs/
    test_torch_library.py registers one for "MUSA"): the device runs that kernel, as a real backend does."""
    return getattr(func, "namespace", "aten") not in _TORCH_NAMESPACES and \
        torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "PrivateUse1")


def _device_kernel(func: Any, args: tuple, kwargs: dict) -> Any:
    """Call the kernel registered for the device's key with the device tensors themselves (the Python key,
    which brought the call here, sits above it; the CPU data would reach the op's CPU kernel, which it lacks)."""
    return torch.library.get_kernel(func, "PrivateUse1").call_boxed(_PRIVATEUSE1, *args, **kwargs)


def _decompose(func: Any, args: tuple, kwargs: dict) -> Any:
    return func.decompose(*args, **kwargs)


def _fresh(out: torch.Tensor, index: int) -> Any:
    """The wrapper of a kernel's new result: EmuTensor(out, index) for the common case (its own storage,
    no offset, no grad), made without the constructor's calls; anything else goes through _wrap."""
    where = _devices.get(index)
    if where is None or out._base is not None or out.layout is not torch.strided or out.storage_offset() \
            or out.requires_grad:
        return _wrap(out, index)
    _allocated(out, index)
    new = _make_wrapper(EmuTensor, out.size(), strides=out.stride(), dtype=out.dtype, device=where)
    new._data = out
    new._index = index
    new._plain = not out.dtype.is_complex
    return new


_make_wrapper = torch.Tensor._make_wrapper_subclass
_NATIVE = Route(RouteKind.NATIVE, "no router: emulated devices run unchecked")  # (the fast path's route then)
_REAL_DTYPES = frozenset(v for v in vars(torch).values() if isinstance(v, torch.dtype) and not v.is_complex)


def _finish(plan: _Plan, args: tuple, kwargs: dict, out: Any, index: int) -> Any:
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
        elif type(same) is EmuTensor and same.shape != same._data.shape:
            _storage.sync(same)  # out=: resized by the kernel, as a real device resizes it
        return same
    if plan.outs is not None:
        # several out= arguments (max(dim, out=(values, indices)), sort, ...): each written (and resized
        # where the kernel resized it), and returned itself
        written = []
        for position, name in plan.outs:
            same = args[position] if position < len(args) else kwargs[name]
            if type(same) is EmuTensor and same.shape != same._data.shape:
                _storage.sync(same)
            written.append(same)
        return tuple(written)
    if isinstance(out, torch.Tensor) and out.dtype.is_complex:
        return _wrap_bits(plan.func, args, out, max(index, 0))
    if plan.view and torch.is_inference_mode_enabled():
        base = next((a for a in args if isinstance(a, EmuTensor)), None)
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
    if type(out) is torch.Tensor and out.dtype in state.torch_dtypes:
        return
    produced = foreign_output_dtype(func, out, state.dtypes)
    if produced is not None:
        raise state.router.error(canonical_op_name(func), args, kwargs, Route(RouteKind.UNSUPPORTED, route.source),
                                 f"it produces {produced}, which is not in precision.dtypes")



# Ops with a handler of their own (the other modules of the emulator add theirs).
SPECIAL: dict[Any, Callable[[Any, tuple, dict], Any]] = {}


# The vendor's own check of a convolution's devices, where its kernel words it (what a device mismatch of the
# input and weight raises on the chip): torch_musa/csrc/aten/ops/Conv.cpp `Convolution` (convolution_overrideable,
# which aten::convolution and aten::_convolution reach on the chip) checks the devices before anything else.
_CONV_MISMATCH = {
    "musa": "Expected weight tensor and input tensor to be on the same MUSA device, but got weight on {weight} "
            "and input on {input}",
}
_CONVOLUTIONS = (aten.convolution.default, aten._convolution.default)
_plain_plans: dict[int, _Plan] = {}


def _convolution(func: Any, args: tuple, kwargs: dict) -> Any:
    """A convolution on the device. While torch.jit.trace runs, ``aten::convolution`` goes on as its
    CompositeExplicitAutograd kernel does, to ``aten::_convolution`` with the cuDNN flags: PyTorch's tracer never
    records convolution itself (torchgen's DONT_RECORD_TRACE), only what it calls. On a real device that call passes
    the tracer; here the Python key took convolution before its kernel, so the trace missed the op and kept its
    result as a constant (torch_musa's tests/unittest/jit/test_jit_save_load.py: "Cannot insert a Tensor that
    requires grad as a constant")."""
    if len(args) > 1 and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor) and \
            args[0].device != args[1].device and state.description is not None:
        text = _CONV_MISMATCH.get(wider.chip_key(state.description))
        if text is not None:
            raise RuntimeError(text.format(weight=args[1].device, input=args[0].device))
    plan = _plain_plans.get(id(func))
    if plan is None:
        plan = _plain_plans[id(func)] = _Plan(func)
        plan.special = None
    out = _dispatch_planned(plan, func, args, kwargs)
    tracing = torch._C._get_tracing_state()
    if func is aten.convolution.default and tracing is not None:
        _trace_convolution(tracing, args, kwargs, out)
    return out


def _trace_convolution(tracing: Any, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
    """Record ``aten::_convolution`` in the trace for `out`, as the tracer records it where convolution's
    kernel calls it (Python dispatch excludes the Tracer key, so the call made here would not be seen)."""
    cudnn = torch.backends.cudnn
    schema = aten.convolution.default._schema.arguments
    values = [args[i] if i < len(args) else kwargs.get(a.name, a.default_value) for i, a in enumerate(schema)]
    values += [cudnn.benchmark, cudnn.deterministic or torch.are_deterministic_algorithms_enabled(),
               cudnn.enabled, cudnn.allow_tf32]
    graph = tracing.graph()
    inputs = []
    for value in values:
        if isinstance(value, torch.Tensor):
            inputs.append(torch._C._get_value_trace(value))
        else:
            inputs.append(graph.insertConstant(list(value) if isinstance(value, tuple) else value))
    node = graph.create("aten::_convolution", inputs, 1)
    graph.insertNode(node)
    node.output().inferTypeFrom(out)
    torch._C._set_value_trace(out, node.output())


for _conv in _CONVOLUTIONS:
    SPECIAL[_conv] = _convolution


state.tensor_type = EmuTensor


def to_host(value: Any) -> Any:
    """The CPU data of every EmuTensor in `value` (a tensor, or a pytree of them), with its lazy
    conjugate/negative bits; aliasing is kept (a device view is a view of the same CPU data)."""
    return tree_map(lambda t: _logical(t) if isinstance(t, EmuTensor) else t, value)
