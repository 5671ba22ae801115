"""Non-blocking copies and pinned host memory on an emulated chip whose description says
`streams.submission = "async"` (streams.py installs them): a non-blocking copy to the host lands when a sync
covers it (poison before), one to the device reads its pinned source when its stream reaches it, and
`pin_memory=True` factories give host memory recorded as pinned."""

from __future__ import annotations

import os
from typing import Any

import torch

from .memory import _nbytes
from .slot import backend_name, state
from .streams import (
    StreamKey,
    _InFlight,
    _Landing,
    _Pending,
    _script_as,
    _storage_ptr,
    byte_span,
    current_stream,
    is_async,
    stream_of,
    tensor_module,
    timeline,
)

aten = torch.ops.aten

# Non-blocking copies (copies.py's handlers, wrapped) -----------------------------------------------------
def _poison(tensor: torch.Tensor) -> None:
    with torch.no_grad():
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            tensor.fill_(float("nan"))
        elif tensor.dtype is torch.bool:
            tensor.fill_(True)
        else:
            tensor.fill_(torch.iinfo(tensor.dtype).max)


def _defer(dst: torch.Tensor, key: StreamKey, op: str) -> None:
    """`dst` (host) just received a non-blocking copy on stream `key`: hold its values back until a sync."""
    with timeline.lock:
        seq = timeline.tick(key)
        if dst.numel():
            values = dst.clone()
            _poison(dst)
            timeline.pending.append(_Pending(key, seq, dst, values, op))
        span = byte_span(dst)
        if timeline.listener is not None and span is not None:
            timeline.in_flight[span] = _InFlight(key, seq, "destination", op, timeline.listener.stack())


def _read_in_flight(src: torch.Tensor, key: StreamKey, op: str) -> None:
    """`src` (host) is read by a non-blocking copy on stream `key`: in flight until a sync covers it."""
    with timeline.lock:
        seq = timeline.tick(key)
        span = byte_span(src)
        if timeline.listener is not None and span is not None:
            timeline.in_flight[span] = _InFlight(key, seq, "source", op, timeline.listener.stack())


def _lands_later(src: torch.Tensor, dst: Any) -> bool:
    """Whether a non-blocking copy from pinned host memory `src` to `dst` reads its source later, when its
    stream reaches it: into a strided real tensor of the emulated device (the others keep the copy at issue)."""
    return bool(src.numel()) and isinstance(dst, state.tensor_type) and dst._plain


def _land_later(dst: Any, src: torch.Tensor, key: StreamKey) -> None:
    """`dst` (device) receives `src` (pinned host) when stream `key` is reached: a later op on it (or on a
    stream ordered after it), or a host synchronisation that covers it."""
    with timeline.lock:
        timeline.landing.append(_Landing(key, timeline.tick(key), dst, src))
        if len(timeline.landing) == 1:
            tensor_module().set_device_op_hook("landing", _reach_landings)


def _reach_landings(func: Any, args: tuple) -> None:
    """tensor.py's hook while copies wait to land: the op about to run on the emulated device is issued
    on the current stream of its first device tensor's device."""
    device = state.tensor_type
    index = state.current
    touched: set[int] = set()
    for arg in args:
        for item in (arg if isinstance(arg, (list, tuple)) else (arg,)):
            if type(item) is device:
                if not touched:
                    index = item._index
                touched.add(_storage_ptr(item._data))
    timeline.reached(current_stream(index)._key, touched)


def _non_blocking(args: tuple, kwargs: dict, position: int) -> bool:
    return bool(args[position] if len(args) > position else kwargs.get("non_blocking", False))


def _host(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and not isinstance(tensor, state.tensor_type) and \
        tensor.device.type == "cpu"


def _pinned(tensor: torch.Tensor) -> bool:
    from . import storage

    return storage.is_pinned(tensor)


def _to_host(original: Any, func: Any, args: tuple, kwargs: dict, src: Any, op: str, deferred: bool,
             dst: torch.Tensor | None = None) -> Any:
    """A copy of device tensor `src` to the host (into `dst`, or a new tensor: the op's result). `deferred`:
    the host may see it complete later (non-blocking, into pinned memory); any other copy to the host waits
    for its stream before it returns (CUDA and torch_npu copy into pageable memory synchronously)."""
    key = current_stream(src._index)._key
    if not (deferred and is_async()):
        timeline.sync_stream(key, "a blocking copy to the host (.cpu(), .to('cpu'), copy_)")
        return original(func, args, kwargs)
    out = original(func, args, kwargs)
    if dst is None:
        dst = out
        _mark_pinned(out)  # (a non-blocking copy to a new host tensor lands in pinned memory, as on CUDA)
    _defer(dst, key, op)
    return out


def _to_device(original: Any, func: Any, args: tuple, kwargs: dict, src: torch.Tensor, index: int, op: str,
               non_blocking: bool, dst: Any = None) -> Any:
    """A copy of host tensor `src` to device `index` (into `dst`, or a new tensor: the op's result). Only a
    non-blocking copy from pinned memory leaves the host before the chip has read the source: from pageable
    memory CUDA and torch_npu stage the source before the call returns, so the host may change it at once."""
    key = current_stream(index)._key
    timeline.reach(key, src)
    if not (non_blocking and is_async()):
        return original(func, args, kwargs)
    if not _pinned(src):
        return original(func, args, kwargs)
    if dst is not None and _lands_later(src, dst):
        # (nothing copied now: the source is read when the stream reaches the copy)
        state.h2d_bytes += _nbytes(src)
        state.h2d_calls += 1
        out = dst
        _land_later(dst, src, key)
    else:
        out = original(func, args, kwargs)
        if dst is None and _lands_later(src, out):
            _land_later(out, src, key)
    _read_in_flight(src, key, op)
    return out


def wrap_copy(original: Any) -> Any:
    def copy_(func: Any, args: tuple, kwargs: dict) -> Any:
        non_blocking = _non_blocking(args, kwargs, 2)
        if timeline.idle() and not non_blocking:
            return original(func, args, kwargs)  # (nothing deferred, nothing to defer: the copy as it was)
        dst, src = args[0], args[1]
        device = state.tensor_type
        if isinstance(src, device) and _host(dst):
            return _to_host(original, func, args, kwargs, src, "copy_", non_blocking and _pinned(dst), dst)
        if isinstance(dst, device) and _host(src) and src.dim():
            return _to_device(original, func, args, kwargs, src, dst._index, "copy_", non_blocking, dst)
        return original(func, args, kwargs)

    return copy_


def wrap_to_copy(original: Any) -> Any:
    def to_copy(func: Any, args: tuple, kwargs: dict) -> Any:
        non_blocking = bool(kwargs.get("non_blocking"))
        if timeline.idle() and not non_blocking:
            return original(func, args, kwargs)
        src, target = args[0], kwargs.get("device")
        if target is None:
            return original(func, args, kwargs)
        if isinstance(src, state.tensor_type) and target.type == "cpu":
            return _to_host(original, func, args, kwargs, src, "_to_copy", non_blocking)
        if _host(src) and target.type == backend_name() and src.dim():
            index = target.index if target.index is not None else state.current
            return _to_device(original, func, args, kwargs, src, index, "_to_copy", non_blocking)
        return original(func, args, kwargs)

    return to_copy


def wrap_item(original: Any) -> Any:
    def item(func: Any, args: tuple, kwargs: dict) -> Any:
        if not timeline.idle() and isinstance(args[0], state.tensor_type):
            timeline.sync_stream(current_stream(args[0]._index)._key)  # .item(): a blocking copy (counted
            # by the sanitizer as item())
        return original(func, args, kwargs)

    return item


def record_stream(func: Any, args: tuple, kwargs: dict) -> None:
    """``tensor.record_stream(s)``: the tensor's memory is in use on `s` (the sanitizer checks its free)."""
    if timeline.listener is not None:
        timeline.listener.record_stream(args[0], stream_of(args[1]))


# Pinned host memory -------------------------------------------------------------------------------------
# torch.<factory>(..., pin_memory=True) asks PrivateUse1's hooks for getPinnedMemoryAllocator, which a Python
# backend cannot provide (torch 2.13); the factories are answered with host memory recorded as pinned
# (storage.py's record, which is_pinned() and pin_memory() read), as pin_memory() already is.
PINNING_FACTORIES = ("arange", "bartlett_window", "blackman_window", "empty", "empty_like", "empty_permuted",
                      "empty_strided", "eye", "full", "full_like", "hamming_window", "hann_window", "kaiser_window",
                      "linspace", "logspace", "ones", "ones_like", "rand", "rand_like", "randint", "randint_like",
                      "randn", "randn_like", "randperm", "range", "scalar_tensor", "tensor", "tril_indices",
                      "triu_indices", "zeros", "zeros_like")


def _mark_pinned(tensor: torch.Tensor) -> None:
    from torch.multiprocessing.reductions import StorageWeakRef

    from . import storage

    if tensor.layout is torch.strided and tensor.device.type == "cpu":
        host = tensor.untyped_storage()
        storage._pinned[host._cdata] = StorageWeakRef(host)


# The wrapper is compiled under a file name in torch's directory: code that asks who called a factory (the
# CUDA alias leaves torch-fl's own requests alone, and reports the user's line) must see the caller of the
# factory, as it does for PyTorch's own function.
_PINNING_SOURCE = """
def factory(*args, **kwargs):
    if not kwargs.get("pin_memory"):
        return original(*args, **kwargs)
    kwargs["pin_memory"] = False
    return pinned(original(*args, **kwargs))
"""
_PINNING_FILE = os.path.join(os.path.dirname(torch.__file__), "_torch_fl_pinned_factory.py")


def _pinned_result(out: torch.Tensor) -> torch.Tensor:
    if out.device.type != "cpu":
        raise RuntimeError(f"Only dense CPU tensors can be pinned (pin_memory=True on {out.device})")
    _mark_pinned(out)
    return out


def pinning(original: Any) -> Any:
    namespace: dict[str, Any] = {"original": original, "pinned": _pinned_result}
    exec(compile(_PINNING_SOURCE, _PINNING_FILE, "exec"), namespace)  # (a fixed source)
    factory = namespace["factory"]
    factory.__name__ = factory.__qualname__ = original.__name__
    factory.__doc__ = original.__doc__
    factory.__wrapped__ = original
    return factory


# copies.py's handlers as they were before the wrapping (benchmarks/streams_sanitizer.py times both)
unwrapped: dict[Any, Any] = {}


def install() -> None:
    """Once, with the backend (after streams.install): non-blocking copies and .item() in stream order,
    record_stream, and the pin_memory=True factories."""
    from . import tensor

    special = tensor.SPECIAL
    for op, wrap in ((aten.copy_.default, wrap_copy), (aten._to_copy.default, wrap_to_copy),
                     (aten._local_scalar_dense.default, wrap_item)):
        unwrapped[op] = special[op]
        special[op] = wrap(special[op])
        tensor._plans.pop(id(op), None)
    special[aten.record_stream.default] = record_stream
    tensor._plans.pop(id(aten.record_stream.default), None)
    # `with torch.device(...)` recognises factories by identity, from a set it builds once: built now, from
    # PyTorch's own functions (which the C++ torch-function call hands it), with the wrappers added
    from torch.utils._device import _device_constructors

    constructors = _device_constructors()
    for name in PINNING_FACTORIES:
        original = getattr(torch, name, None)
        if original is not None:
            wrapper = pinning(original)
            setattr(torch, name, wrapper)
            _script_as(wrapper, name)
            if original in constructors:
                constructors.add(wrapper)
