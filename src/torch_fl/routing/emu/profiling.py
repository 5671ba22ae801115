"""torch.profiler on the emulated device: Kineto's host trace, and the chip's kernels and copies as device activity.

``torch.autograd.profiler.profile(use_device="npu")``: without ``use_kineto=True`` PyTorch profiles a PrivateUse1
device in its "fallback" state, which times each op with device events from the backend's C++ profiler stubs
(``registerPrivateUse1Methods``). A Python backend registers none, so every profiled op on the emulated device
printed PyTorch's "Exception in RecordFunction callback: kineto_ctx_ptr != nullptr INTERNAL ASSERT FAILED"
(torch_npu's own tests profile this way: test/trans_contiguous/*). The emulated device runs each op when it is
called, on the host, so it has no device events to time: its profile is Kineto's host trace (the state
``use_kineto=True`` selects, with the PrivateUse1 activity where Kineto has it), which is what those calls ask
for here. Other devices keep PyTorch's profiler.

Every profile of the device's activity (``torch.profiler.profile()`` with its default activities or with
``ProfilerActivity.PrivateUse1``, ``use_device=<the device>``, ``torch.fl.profile``) also records the ops issued
on the device while it runs, and its exported Chrome trace shows them as a GPU's kernels and copies (below).
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .slot import backend_name

_original_init: Any = None
ORIGINALS: dict[str, Any] = {}  # torch's methods of torch.autograd.profiler.profile that _install_tracks wraps


def install() -> None:
    """Once per process: profiles of the emulated device take Kineto's state (no C++ stubs to time with), and
    the profiles that ask for the device's activity record its ops for their trace (`_install_tracks`)."""
    global _original_init
    if _original_init is not None:
        return
    profile = torch.autograd.profiler.profile
    _original_init = profile.__init__

    @functools.wraps(_original_init)
    def __init__(self: Any, *args: Any, use_device: str | None = None, use_kineto: bool = False,
                 **kwargs: Any) -> None:
        if use_device is not None and use_device == backend_name():
            use_kineto = True  # (the fallback state needs the backend's C++ event stubs)
        _original_init(self, *args, use_device=use_device, use_kineto=use_kineto, **kwargs)

    profile.__init__ = __init__
    _install_tracks(profile)


def _install_tracks(profile: type) -> None:
    """The device's ops as device activity in any profiler's trace, not only torch.fl.profile's: the recorder
    starts where a profile's collection starts and stops where it stops, and the export adds the device
    tracks. torch.profiler.profile (and its schedule's cycles, tensorboard_trace_handler, a ``.gz`` trace)
    drives an autograd profiler.profile through exactly these three methods, so hooking them covers it. A
    profile that does not ask for the device's activity (``activities=[ProfilerActivity.CPU]``) gets CPU
    events only, as on a GPU; with no profiler running nothing is hooked (the dispatch's hook stays None)."""
    start, stop, export = profile._start_trace, profile.__exit__, profile.export_chrome_trace
    ORIGINALS.update(_start_trace=start, __exit__=stop, export_chrome_trace=export)

    @functools.wraps(start)
    def _start_trace(self: Any) -> None:
        start(self)
        if getattr(self, "use_device", None) == backend_name() and \
                getattr(self, "profiler_kind", None) is not None:
            # (a new recorder per collection: a schedule's cycles each export their own last cycle)
            self._fl_recorder = KernelRecorder().__enter__()

    @functools.wraps(stop)
    def __exit__(self: Any, *exc: Any) -> Any:
        try:
            return stop(self, *exc)
        finally:
            recorder = getattr(self, "_fl_recorder", None)
            if recorder is not None:
                recorder.__exit__()

    @functools.wraps(export)
    def export_chrome_trace(self: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        out = export(self, path, *args, **kwargs)
        recorder = getattr(self, "_fl_recorder", None)
        if recorder is not None and recorder.records and getattr(self, "kineto_results", None) is not None:
            self._fl_device_tracks = add_device_tracks(str(path), recorder.records, backend_name())
        return out

    profile._start_trace = _start_trace
    profile.__exit__ = __exit__
    profile.export_chrome_trace = export_chrome_trace


def device_tracks(prof: Any) -> dict[str, Any] | None:
    """What the last export of `prof` (a torch.profiler.profile or torch.autograd.profiler.profile) added as
    the emulated device's activity (`add_device_tracks`'s counts), None when it added nothing."""
    inner = getattr(prof, "profiler", None) if not isinstance(prof, torch.autograd.profiler.profile) else prof
    return getattr(inner, "_fl_device_tracks", None)


# Device activity in a trace ---------------------------------------------------------------------------------
# torch.profiler records the emulated device's ops as CPU events only: its kernels run on the host, inside
# PyTorch's "PythonSubclass" range of the wrapper's dispatch, and Kineto has no activity for a Python
# backend. While a profile of the device runs, the device-op hook (tensor.py) notes each op's device, stream and
# kind in issue order; the exported Chrome trace then gets what Kineto writes for a GPU: a process per device,
# a thread per stream, each kernel ("cat": "kernel") and host<->device copy ("cat": "gpu_memcpy") on it with
# the time of its dispatch span, a launch event on the CPU thread and an "ac2g" flow between the two. A CPU
# fallback's two copies (its arguments to the host, its results back) become memcpy events too.
_SUBCLASS = "PythonSubclass"
_LOOKAHEAD = 64  # ranges of other wrapper subclasses skipped at most between two of the device's ops
_FALLBACK = "fl::fallback "
TO_HOST = "DtoH (Device -> Pageable)"  # (how CUPTI names a copy to pageable host memory, and back)
TO_DEVICE = "HtoD (Pageable -> Device)"


@dataclass(frozen=True)
class _Meta:
    """A tensor argument of a routed call, as the export needs it: to size the copies of a fallback."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    on_device: bool


@dataclass
class _Routed:
    """A call whose route is not native (a fallback, or a translation that may fail over to one): the op and
    its arguments' metadata, so that the export sizes the fallback's copies (its results by the op's meta
    kernel, only for the calls that did fall back)."""

    func: Any
    args: Any


class KernelRecorder:
    """The ops issued on the emulated device while it is on (``with KernelRecorder() as r``): ``r.records``,
    one (thread id, op name, device index, stream id, copy kind or "", bytes, _Routed or None) per op, in
    issue order."""

    def __init__(self) -> None:
        from . import streams

        self.records: list[tuple[int, str, int, int, str, int, _Routed | None]] = []
        self._routed: dict[tuple[int, torch.dtype], bool] = {}
        self._names: dict[Any, str | None] = {}  # op -> its name, None for ops that launch no kernel
        self._streams = streams

    def __enter__(self) -> KernelRecorder:
        from . import tensor

        tensor.set_device_op_hook("profile", self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        from . import tensor

        if tensor._device_op_hooks.get("profile") == self._note:  # (not a later profile's recorder)
            tensor.set_device_op_hook("profile", None)

    def _note(self, func: Any, args: tuple) -> None:
        # (runs inside the op's dispatch span, whose time becomes the kernel's: kept to dict reads)
        name = self._names.get(func, _UNSEEN)
        if name is _UNSEEN:
            name = self._names[func] = None if func is None or func.is_view or func.name() in _NO_KERNEL \
                else func.name()
        if name is None:
            return  # (tolist(), printing: no dispatched op; views and allocations: no kernel on a GPU either)
        streams = self._streams
        device = streams.state.tensor_type
        first = None
        for arg in args:
            if type(arg) is device:
                first = arg
                break
        index = first._index if first is not None else streams.state.current
        kind, nbytes = _copy_kind(func, args, device) if name in _COPIES else ("", 0)
        routed = None
        if not kind and first is not None and self._is_routed(func, first.dtype):
            routed = _Routed(func, tree_map(lambda a: _meta_of(a, device) if isinstance(a, torch.Tensor) else a,
                                            args))
        self.records.append((threading.get_native_id(), name, index, streams.current_key(index)[1], kind,
                             nbytes, routed))

    def _is_routed(self, func: Any, dtype: torch.dtype) -> bool:
        """Whether the device's route table sends (func, dtype) anywhere but to its native kernel (cached)."""
        key = (id(func), dtype)
        found = self._routed.get(key)
        if found is None:
            from ..._names import RouteKind
            from ..._opnames import canonical_op_name
            from ..table import dtype_name
            from .slot import state

            found = state.router is not None and state.table is not None and \
                state.table.route(canonical_op_name(func), dtype_name(dtype)).kind is not RouteKind.NATIVE
            self._routed[key] = found
        return found


def _meta_of(tensor: torch.Tensor, device: type) -> _Meta:
    strided = tensor.layout is torch.strided
    return _Meta(tuple(tensor.shape), tuple(tensor.stride()) if strided else (), tensor.dtype,
                 tensor.numel() * tensor.element_size(), type(tensor) is device)


_UNSEEN = object()
_COPIES = frozenset({"aten::copy_", "aten::_local_scalar_dense", "aten::_to_copy"})  # (_copy_kind's ops)
_NO_KERNEL = frozenset({"aten::empty_like", "aten::empty_strided", "aten::empty.memory_format", "aten::new_empty",
                        "aten::new_empty_strided", "aten::resize_", "aten::set_", "aten::lift_fresh",
                        "aten::record_stream", "aten::_unsafe_view"})  # (_unsafe_view: a view by another name)


def _copy_kind(func: Any, args: tuple, device: type) -> tuple[str, int]:
    """('HtoD (Pinned -> Device)', bytes) for a copy between host and device (as CUPTI names them), ('', 0)
    for a kernel."""
    from . import storage

    name = func.name()
    if name == "aten::copy_" and len(args) >= 2 and isinstance(args[1], torch.Tensor):
        dst, src = args[0], args[1]
        size = src.numel() * src.element_size()
        if type(dst) is device and type(src) is device:
            return "DtoD (Device -> Device)", size
        if type(dst) is device:
            return f"HtoD ({'Pinned' if storage.is_pinned(src) else 'Pageable'} -> Device)", size
        if type(src) is device:
            return f"DtoH (Device -> {'Pinned' if storage.is_pinned(dst) else 'Pageable'})", size
    if name == "aten::_local_scalar_dense":  # (.item())
        return TO_HOST, args[0].element_size()
    if name == "aten::_to_copy" and args and type(args[0]) is device:
        return TO_HOST, args[0].numel() * args[0].element_size()
    return "", 0


def fallback_bytes(routed: _Routed) -> tuple[int, int | None]:
    """The bytes a CPU fallback of `routed` copies on a chip with its own memory, as routing/router.py's
    cpu_fallback copies them: (to the host: every device tensor argument; back to the device: the arguments
    it writes and its new results). The results are sized by the op's meta kernel; None for the copy back
    when the op has none (or it refuses these arguments)."""
    from ..router import _writes

    leaves, _ = tree_flatten(routed.args)
    to_host = sum(m.nbytes for m in leaves if isinstance(m, _Meta) and m.on_device)
    schema = routed.func._schema
    back = 0
    for argument, value in zip(schema.arguments, routed.args, strict=False):
        if _writes(routed.func, argument):
            back += sum(m.nbytes for m in tree_flatten(value)[0] if isinstance(m, _Meta))
    fresh = [i for i, r in enumerate(schema.returns) if r.alias_info is None]  # (aliases: the written ones)
    if not fresh:
        return to_host, back
    try:
        meta_args = tree_map(lambda m: torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device="meta")
                             if isinstance(m, _Meta) else m, routed.args)
        out = routed.func(*meta_args)
    except Exception:  # (no meta kernel, or a data-dependent output size: the copy back is not sized)
        return to_host, None
    outs = out if isinstance(out, (tuple, list)) and len(schema.returns) > 1 else (out,)
    for i in fresh:
        if i < len(outs):
            back += sum(t.numel() * t.element_size() for t in tree_flatten(outs[i])[0]
                        if isinstance(t, torch.Tensor))
    return to_host, back


def _base(name: str) -> str:
    """aten::mm.default -> aten::mm (trace events name ops without the overload)."""
    return name.split(".", 1)[0]


def add_device_tracks(path: str, records: list[tuple[int, str, int, int, str, int, _Routed | None]],
                      device_type: str) -> dict[str, Any]:
    """Add the recorded ops of the emulated device to the Chrome trace at `path` as device activity (see
    above); returns what was added: {"kernels": n, "memcpy": {name: {"calls": n, "bytes": n}}}. Each record is
    matched, in order, to the next "PythonSubclass" range of its thread whose enclosing op has its name; a
    range with another such range inside (a translated op: its sub-ops are the kernels) is no kernel of its
    own, and one with a fallback's range inside is its two copies (its work ran on the host)."""
    with open(path) as file:
        trace = json.load(file)
    events = trace["traceEvents"]
    by_thread: dict[Any, list[dict]] = {}
    for event in events:
        if event.get("ph") == "X" and event.get("cat") in ("cpu_op", "user_annotation"):
            by_thread.setdefault(event["tid"], []).append(event)
    spans = []  # (record, PythonSubclass event, its enclosing op)
    parents: dict[int, dict | None] = {}
    children: dict[int, list[dict]] = {}
    for tid, thread_events in by_thread.items():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for event in thread_events:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < event["ts"] + event["dur"]:
                stack.pop()
            parents[id(event)] = stack[-1] if stack else None
            if stack:
                children.setdefault(id(stack[-1]), []).append(event)
            stack.append(event)
        subclass = [e for e in thread_events if e["name"] == _SUBCLASS and parents[id(e)] is not None]
        position = 0
        for record in (r for r in records if r[0] == tid):
            found = next((j for j in range(position, min(position + _LOOKAHEAD, len(subclass)))
                          if parents[id(subclass[j])]["name"] == _base(record[1])), None)
            if found is None:  # (an op whose range the trace lacks: the next record may still match)
                continue
            spans.append((record, subclass[found], parents[id(subclass[found])]))
            position = found + 1
    matched = {id(span) for _, span, _ in spans}
    hosts = set()  # matched spans with a matched span or a fallback's range inside: no kernel of their own
    fallbacks: dict[int, dict] = {}  # matched span -> the fallback range directly in it
    for thread_events in by_thread.values():
        for event in thread_events:
            if id(event) in matched or event["name"].startswith(_FALLBACK):
                parent = parents[id(event)]
                while parent is not None and id(parent) not in matched:
                    parent = parents[id(parent)]
                if parent is not None:
                    hosts.add(id(parent))
                    if event["name"].startswith(_FALLBACK):
                        fallbacks.setdefault(id(parent), event)
    added: dict[str, Any] = {"kernels": 0, "memcpy": {}}
    correlation = itertools.count(1 << 20)
    streams_seen: set[tuple[int, int]] = set()

    def emit(record: tuple, span: dict, op: dict, name: str, copy: str, nbytes: int, start: float,
             dur: float, extra: dict[str, Any]) -> None:
        index, stream = record[2], record[3]
        cid = next(correlation)
        streams_seen.add((index, stream))
        args = {"device": index, "stream": stream, "correlation": cid, "External id": op["args"].get("External id"),
                "emulated": "torch-fl: the time of the op's dispatch on the host", **extra}
        if copy:
            args["bytes"] = nbytes
            device_event = {"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {copy}", "pid": index, "tid": stream,
                            "ts": start, "dur": dur, "args": args}
            row = added["memcpy"].setdefault(device_event["name"], {"calls": 0, "bytes": 0})
            row["calls"] += 1
            row["bytes"] += nbytes
        else:
            device_event = {"ph": "X", "cat": "kernel", "name": name, "pid": index, "tid": stream, "ts": start,
                            "dur": dur, "args": args}
            added["kernels"] += 1
        launch = {"ph": "X", "cat": "cuda_runtime", "name": "emuMemcpyAsync" if copy else "emuLaunchKernel",
                  "pid": span["pid"], "tid": span["tid"], "ts": start, "dur": min(dur, 1.0),
                  "args": {"correlation": cid, "External id": op["args"].get("External id")}}
        flow = {"id": cid, "cat": "ac2g", "name": "ac2g"}
        events.extend([device_event, launch,
                       {**flow, "ph": "s", "pid": span["pid"], "tid": span["tid"], "ts": start},
                       {**flow, "ph": "f", "bp": "e", "pid": index, "tid": stream, "ts": start}])

    for record, span, op in spans:
        if id(span) not in hosts:
            emit(record, span, op, _base(record[1]), record[4], record[5], span["ts"], span["dur"], {})
            continue
        fallback = fallbacks.get(id(span))
        if fallback is None or record[6] is None:
            continue  # (a translation: its sub-ops are the kernels)
        # A fallback: its arguments go to the host before its host kernel and its results come back after
        # it, as cpu_fallback copies them on a chip with its own memory; the emulator's time before and
        # after the host kernel (reading and wrapping the device's tensors) is their time.
        to_host, back = fallback_bytes(record[6])
        work = children.get(id(fallback), [])
        kernel_start = min((e["ts"] for e in work), default=fallback["ts"])
        kernel_end = max((e["ts"] + e["dur"] for e in work), default=fallback["ts"] + fallback["dur"])
        end = span["ts"] + span["dur"]
        why = {"fallback": fallback["name"][len(_FALLBACK):]}
        emit(record, span, op, "", TO_HOST, to_host, span["ts"], max(kernel_start - span["ts"], 0.0), why)
        emit(record, span, op, "", TO_DEVICE, back or 0, kernel_end, max(end - kernel_end, 0.0),
             why if back is not None else {**why, "bytes_unknown": "results not sized: the op has no meta kernel "
                                                                   "(or its output size depends on the data)"})
    devices = {i for i, _ in streams_seen}
    # (Kineto names pids 0..N "python" / "GPU i" in every trace: the device's own names replace those)
    events[:] = [e for e in events if not (e.get("ph") == "M" and e.get("pid") in devices and e.get("name") in
                                           ("process_name", "process_labels", "process_sort_index"))]
    for index in sorted(devices):
        events += [{"ph": "M", "name": "process_name", "pid": index, "tid": 0,
                    "args": {"name": f"{device_type}:{index} (emulated by torch-fl)"}},
                   {"ph": "M", "name": "process_labels", "pid": index, "tid": 0,
                    "args": {"labels": f"{device_type.upper()} {index}"}},
                   {"ph": "M", "name": "process_sort_index", "pid": index, "tid": 0,
                    "args": {"sort_index": 5_000_000 + index}}]  # (after the CPU rows)
    for index, stream in sorted(streams_seen):
        events.append({"ph": "M", "name": "thread_name", "pid": index, "tid": stream,
                       "args": {"name": f"stream {stream}" + (" (default)" if stream == 0 else "")}})
    with open(path, "w") as file:
        json.dump(trace, file)
    return added
