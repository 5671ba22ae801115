"""What happens to a call once its route is known: native, translate, fallback, kernel or unsupported.

The same Router serves the real dispatch key (install.py) and emulated chips (emulate.py); the caller
passes `native`, a callable that runs the op's own kernel (None when there is none).
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from .. import _env
from .._names import RouteKind
from ..description.generations import with_more_dtypes
from ..errors import FallbackWarning, UnsupportedOperatorError
from . import stats
from .table import Route, RouteTable, dtype_name
from .translate import guard, translation, untranslatable_reason

# (read on every call: a module global is ~4x faster to read than an Enum member)
NATIVE_KIND = RouteKind.NATIVE
# (members bound once: the hot path passes them to stats and the profiler ranges)
_TRANSLATE, _FALLBACK, _KERNEL = RouteKind.TRANSLATE, RouteKind.FALLBACK, RouteKind.KERNEL

Native = Callable[[tuple, dict], Any] | None

# Profiler ranges ------------------------------------------------------------------------------------
# Every non-native call runs inside a torch.profiler range named "fl::ROUTE OP" (fl::translate
# aten::gelu.default), opened where route_stats() counts the call, so a trace's ranges and the counts
# agree; a fallback that copies adds "fl::to_host" and "fl::to_device" ranges around its copies. When no
# profiler is active the only cost is one C call (torch._C._autograd._profiler_enabled, ~45 ns):
# benchmarks/profiler_ranges.py measures it. Native calls are never intercepted, so never ranged.
profiling = torch._C._autograd._profiler_enabled
RANGE_PREFIX = "fl::"
_range_names: dict[tuple[RouteKind, str], str] = {}
try:
    from torch._C._profiler import _RecordFunctionFast as _Range  # a RecordFunction without an op call
except ImportError:  # older torch: the public context manager (it dispatches profiler ops itself)
    from torch.autograd.profiler import record_function as _Range


def range_name(route: RouteKind, op: str) -> str:
    """The profiler range of `op` on `route`: ``fl::translate aten::gelu.default``."""
    name = _range_names.get((route, op))
    if name is None:
        name = _range_names[(route, op)] = f"{RANGE_PREFIX}{route} {op}"
    return name


def _ranged(route: RouteKind, op: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) inside the profiler range of (route, op): the callers check profiling() first and
    call fn directly without a profiler, so that path is the plain call plus one C call."""
    with _Range(range_name(route, op)):
        return fn(*args, **kwargs)


class _Depth(threading.local):
    value = 0


_depth = _Depth()  # nesting of routed calls on this thread (a translation's sub-ops are nested)


def first_dtype(args: tuple, kwargs: dict) -> str | None:
    """The dtype that decides a dtype-conditioned route: the first tensor argument's (a tensor list's
    first element counts), else an explicit dtype= argument."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return dtype_name(arg.dtype)
        if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], torch.Tensor):
            return dtype_name(arg[0].dtype)
    for arg in kwargs.values():
        if isinstance(arg, torch.Tensor):
            return dtype_name(arg.dtype)
    explicit = kwargs.get("dtype")
    return dtype_name(explicit) if isinstance(explicit, torch.dtype) else None


def _describe_args(args: tuple, kwargs: dict) -> str:
    parts = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            parts.append(f"Tensor[{dtype_name(value.dtype)}, {tuple(value.shape)}, {value.device}]")
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            parts.append("[" + ", ".join(f"Tensor[{dtype_name(t.dtype)}, {tuple(t.shape)}]"
                                         for t in value if isinstance(t, torch.Tensor)) + "]")
        else:
            parts.append(repr(value) if len(repr(value)) < 40 else type(value).__name__)
    return ", ".join(parts)


class Router:
    """Runs calls by route for one description on one device type."""

    def __init__(self, table: RouteTable, device_label: str, *, host_is_device: bool):
        self.table = table
        self.device_label = device_label
        # On the CPU key and on emulated chips the "device" already is the CPU: a fallback runs the
        # op's own CPU kernel instead of copying.
        self.host_is_device = host_is_device
        self.strict = _env.FL_FALLBACK.value() == "error"
        self._warned: set[str] = set()
        self._cpu_kernels: dict[str, bool] = {}

    def call(self, op: str, ovl: torch._ops.OpOverload, route: Route, dtype: str | None,
             args: tuple, kwargs: dict, native: Native, reenter: Any = None) -> Any:
        if route.kind is NATIVE_KIND:
            if native is None:
                raise self.error(op, args, kwargs, route, "the route is native but the device has no "
                                 "kernel for it")
            return native(args, kwargs)
        # Non-native calls are slow anyway; timing them tells `torchfl bench` where the time goes.
        start = time.perf_counter()
        _depth.value += 1
        try:
            return self._run(op, ovl, route, dtype, args, kwargs, native, reenter)
        finally:
            _depth.value -= 1
            stats.add_time(op, dtype, route.kind, time.perf_counter() - start, top_level=_depth.value == 0)

    def _run(self, op: str, ovl: torch._ops.OpOverload, route: Route, dtype: str | None,
             args: tuple, kwargs: dict, native: Native, reenter: Any) -> Any:
        kind = route.kind
        if kind is RouteKind.TRANSLATE:
            return self.translate(op, ovl, route, dtype, args, kwargs, native, reenter)
        if kind is RouteKind.FALLBACK:
            return self.fallback(op, ovl, route, dtype, args, kwargs, native)
        if kind is RouteKind.KERNEL:
            stats.record(op, dtype, RouteKind.KERNEL, route.source)
            if profiling():
                return _ranged(_KERNEL, op, self._kernel, op, route, args, kwargs, native)
            return self._kernel(op, route, args, kwargs, native)
        raise self.error(op, args, kwargs, route)

    def _kernel(self, op: str, route: Route, args: tuple, kwargs: dict, native: Native) -> Any:
        if guard.in_kernel[op]:
            # The kernel calls its own op (to wrap or fix up the native result): that inner call
            # is the native kernel's, or the kernel would recurse forever.
            if native is None:
                raise self.error(op, args, kwargs, route, "the registered kernel calls the op "
                                 "itself, and the device has no native kernel for it")
            return native(args, kwargs)
        guard.in_kernel[op] += 1
        try:
            return route.kernel(*args, **kwargs)
        finally:
            guard.in_kernel[op] -= 1

    def translate(self, op: str, ovl: torch._ops.OpOverload, route: Route, dtype: str | None,
                  args: tuple, kwargs: dict, native: Native, reenter: Any) -> Any:
        reason = untranslatable_reason(op)
        if reason is not None:
            return self._untranslatable(op, ovl, route, dtype, args, kwargs, native, reason)
        fn = translation(op)
        stats.record(op, dtype, _TRANSLATE, route.source)
        guard.depth[op] += 1
        try:
            if reenter is not None:
                with reenter:  # emulation: the decomposition's sub-ops are checked too
                    out = _ranged(_TRANSLATE, op, fn, *args, **kwargs) if profiling() else fn(*args, **kwargs)
            else:
                out = _ranged(_TRANSLATE, op, fn, *args, **kwargs) if profiling() else fn(*args, **kwargs)
        except UnsupportedOperatorError as exc:
            # Name the op the model called, not only the sub-op PyTorch's decomposition reached.
            raise UnsupportedOperatorError(
                f"{exc}\n  reached while translating {op} ({_describe_args(args, kwargs)})") from None
        finally:
            guard.depth[op] -= 1
        if out is NotImplemented:
            return self._untranslatable(op, ovl, route, dtype, args, kwargs, native,
                                        "its decomposition does not cover these inputs")
        return out

    def _untranslatable(self, op: str, ovl: torch._ops.OpOverload, route: Route, dtype: str | None,
                        args: tuple, kwargs: dict, native: Native, why: str) -> Any:
        if self.table.description.section("ops")["default"] == "translate-or-fallback":
            return self.fallback(op, ovl, Route(RouteKind.FALLBACK, f"{route.source}; translation failed: {why}"),
                                 dtype, args, kwargs, native)
        raise self.error(op, args, kwargs, route, f"cannot translate: {why}")

    def fallback(self, op: str, ovl: torch._ops.OpOverload, route: Route, dtype: str | None,
                 args: tuple, kwargs: dict, native: Native) -> Any:
        if self.strict:
            raise self.error(op, args, kwargs, route, "FL_FALLBACK=error forbids running it on the CPU "
                             "(strict mode)")
        if op not in self._warned:
            self._warned.add(op)
            cost = ("On this device that is the op's own CPU kernel, but on the chip every call copies "
                    "its tensors to the host and back." if self.host_is_device else
                    "Each call copies its tensors to the host and back.")
            warnings.warn(
                f"torch-fl: {op} [{dtype}] runs on the CPU (fallback) on {self.device_label}: "
                f"{route.source}. {cost} To make it fast, "
                f"register a kernel (torch.fl.register_kernel('{op}', fn)) or ask the vendor for a native "
                f"one; to silence this warning: warnings.filterwarnings('ignore', "
                f"category=torch_fl.errors.FallbackWarning). Counts: torch.fl.route_stats().",
                FallbackWarning, stacklevel=3)
        stats.record(op, dtype, _FALLBACK, route.source)
        if self.host_is_device:
            if native is None or not self._cpu_can_run(op):
                raise self.error(op, args, kwargs, route, "the CPU has no kernel for it either")
            return _ranged(_FALLBACK, op, native, args, kwargs) if profiling() else native(args, kwargs)
        if profiling():
            return _ranged(_FALLBACK, op, cpu_fallback, ovl, args, kwargs)
        return cpu_fallback(ovl, args, kwargs)

    def error(self, op: str, args: tuple, kwargs: dict, route: Route, reason: str = "") -> \
            UnsupportedOperatorError:
        desc = self.table.description
        return UnsupportedOperatorError(
            f"{op} is not supported on {self.device_label} (description '{desc.name}')"
            + (f": {reason}" if reason else "") + f".\n"
            f"  inputs: {_describe_args(args, kwargs)}\n"
            f"  route: {route.kind}, decided by {route.source}\n"
            f"  fixes:\n" + "".join(f"    - {fix}\n" for fix in self.fixes(op, route, reason)).rstrip("\n"))

    def fixes(self, op: str, route: Route, reason: str = "") -> list[str]:
        """The fixes that would make `op` run here, each checked with what this router would do with it
        (a fallback needs a CPU kernel, a translation a decomposition); they name FL_ROUTE or the user's
        config, never a file inside the installed package."""
        desc = self.table.description
        kernel = f"provide a kernel: torch.fl.register_kernel('{op}', fn, device_type='{desc.device_type}')"
        if "precision.dtypes" in route.source or "precision.dtypes" in reason:
            # the tensor itself cannot exist on the chip: no route of the op changes that
            elsewhere = with_more_dtypes(desc)  # a chip of another generation may have it
            return [f"keep the tensor in a dtype '{desc.name}' has (precision.dtypes: {', '.join(desc.dtypes)}): "
                    f"convert it before this call, for example with .float()", *([elsewhere] if elsewhere else [])]
        fixes = []
        if route.kind is not RouteKind.FALLBACK and self._cpu_can_run(op):
            if self.strict:
                fixes.append("allow CPU fallbacks: unset FL_FALLBACK=error (strict mode forbids them), then "
                             f"FL_ROUTE='{op}=fallback'")
            else:
                where = f"; or add it to [ops] fallback in {desc.path}" if not desc.builtin else ""
                fixes.append(f"run it on the CPU (counted and warned): FL_ROUTE='{op}=fallback', or in your "
                             f"config (torch_fl.toml, or [tool.torch_fl] in pyproject.toml): "
                             f"[routes] \"{op}\" = \"fallback\"{where}")
        vendor = self.table.vendor_fallback.off_hint()
        if vendor and route.kind is not RouteKind.FALLBACK and self._cpu_can_run(op):
            fixes.append(f"let the vendor's stack run it on the CPU: {vendor}")
        if route.kind is not RouteKind.TRANSLATE and untranslatable_reason(op) is None:
            fixes.append(f"run PyTorch's decomposition: FL_ROUTE='{op}=translate', or in your config: "
                         f"[routes] \"{op}\" = \"translate\"")
        return [*fixes, kernel]

    def _cpu_can_run(self, op: str) -> bool:
        """Whether a CPU fallback of `op` would run (reference.host_can_run)."""
        can = self._cpu_kernels.get(op)
        if can is None:
            from .reference import host_can_run

            can = self._cpu_kernels[op] = host_can_run(op)
        return can


# CPU fallback on a real device ---------------------------------------------------------------------
TO_HOST = f"{RANGE_PREFIX}to_host"      # the profiler ranges of a fallback's copies
TO_DEVICE = f"{RANGE_PREFIX}to_device"


def _host_copier(force: bool) -> Callable[[Any], Any]:
    def copy(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if value.device.type != "cpu":
            return value.cpu()
        return value.clone() if force else value
    return copy


def _geometry_preserving_copy(t: torch.Tensor, force: bool) -> torch.Tensor:
    """A CPU tensor over a copy of `t`'s whole storage with `t`'s exact size/stride/offset, so a view
    computed on it maps back onto `t`'s storage."""
    storage = t.untyped_storage()
    storage = storage.clone() if force and storage.device.type == "cpu" else storage.cpu()
    return torch.empty(0, dtype=t.dtype).set_(storage, t.storage_offset(), t.size(), t.stride())


# Kernels that write arguments their schema does not mark as written (the batch-norm running stats).
HIDDEN_WRITES: dict[str, tuple[str, ...]] = {
    "native_batch_norm.default": ("running_mean", "running_var"),
    "native_batch_norm.out": ("running_mean", "running_var"),
}


def _writes(ovl: torch._ops.OpOverload, argument: Any) -> bool:
    if argument.alias_info is not None and argument.alias_info.is_write:
        return True
    return argument.name in HIDDEN_WRITES.get(f"{ovl._schema.name.split('::')[-1]}.{ovl._overloadname}", ())


def _write_back(original: torch.Tensor, host: torch.Tensor) -> None:
    if original.shape != host.shape:
        original.resize_(host.shape)
    original.copy_(host)


def _alias_on_device(value: torch.Tensor, args: tuple, cpu_args: tuple) -> torch.Tensor:
    """The device tensor that `value` (a view computed on a geometry-preserving host copy) stands for:
    the same size, stride, offset and dtype over the original device storage, with its conj/neg bits."""
    # Host storage identity, compared on the CPU; no device address is used.
    base = next(a for a, c in zip(args, cpu_args, strict=True) if isinstance(a, torch.Tensor)  # noqa: FL601
                and c.untyped_storage().data_ptr() == value.untyped_storage().data_ptr())
    # set_ (not as_strided) so dtype-changing views (view_as_real, view.dtype) keep the result's dtype.
    alias = torch.empty(0, dtype=value.dtype, device=base.device).set_(
        base.untyped_storage(), value.storage_offset(), value.size(), value.stride())
    if value.is_conj():
        alias = alias.conj()
    if value.is_neg():
        alias = alias._neg_view()
    return alias


def cpu_fallback(ovl: torch._ops.OpOverload, args: tuple, kwargs: dict, *, force_copy: bool = False) -> Any:
    """Run `ovl` on CPU copies of the arguments and bring the results back to the device: written
    arguments (in-place self, out= tensors and tensor lists, batch-norm running stats) are copied back
    into the originals; views are re-created over the device's storage; in-place view ops
    (t_, as_strided_, ...) change the original's geometry, not its data; new tensors move to the device
    of the first device tensor.

    `force_copy` copies CPU tensors too, so tests on a CPU-only machine exercise the same path as a
    device with its own memory."""
    host_copy = _host_copier(force_copy)
    schema = ovl._schema
    flat_inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    device = next((t.device for t in flat_inputs if t.device.type != "cpu"), torch.device("cpu"))
    inplace_view = torch.Tag.inplace_view in ovl.tags
    is_view = inplace_view or any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    ranged = profiling()
    to_host = _Range(TO_HOST) if ranged else contextlib.nullcontext()
    with to_host:
        if is_view:
            cpu_args = tuple(_geometry_preserving_copy(a, force_copy) if isinstance(a, torch.Tensor) else a
                             for a in args)
            cpu_kwargs = {k: host_copy(v) for k, v in kwargs.items()}
        else:
            cpu_args = tree_map(host_copy, args)
            cpu_kwargs = tree_map(host_copy, kwargs)
    from .reference import REFERENCE  # a chip kernel the CPU lacks runs from its reference math

    out = REFERENCE.get(ovl, ovl)(*cpu_args, **cpu_kwargs)
    with _Range(TO_DEVICE) if ranged else contextlib.nullcontext():
        return _copy_back(ovl, args, kwargs, cpu_args, cpu_kwargs, out, device, is_view, inplace_view)


def _copy_back(ovl: torch._ops.OpOverload, args: tuple, kwargs: dict, cpu_args: tuple, cpu_kwargs: dict,
               out: Any, device: torch.device, is_view: bool, inplace_view: bool) -> Any:
    schema = ovl._schema

    written: dict[int, torch.Tensor] = {}
    for i, argument in enumerate(schema.arguments):
        if not _writes(ovl, argument):
            continue
        original = args[i] if i < len(args) else kwargs.get(argument.name)
        host = cpu_args[i] if i < len(args) else cpu_kwargs.get(argument.name)
        if isinstance(original, torch.Tensor) and isinstance(host, torch.Tensor):
            if inplace_view:
                original.set_(original.untyped_storage(), host.storage_offset(), host.size(), host.stride())
            else:
                _write_back(original, host)
            written[id(host)] = original
        elif isinstance(original, (list, tuple)) and isinstance(host, (list, tuple)):
            for one, host_one in zip(original, host, strict=True):
                _write_back(one, host_one)
                written[id(host_one)] = one

    def back(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) in written:
            return written[id(value)]
        if is_view:
            return _alias_on_device(value, args, cpu_args)
        return value.to(device)

    return tree_map(back, out)
