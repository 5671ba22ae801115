"""``torch.autograd.profiler.profile(use_device="npu")`` on the emulated device.

Without ``use_kineto=True`` PyTorch profiles a PrivateUse1 device in its "fallback" state, which times each op
with device events from the backend's C++ profiler stubs (``registerPrivateUse1Methods``). A Python backend
registers none, so every profiled op on the emulated device printed PyTorch's "Exception in RecordFunction
callback: kineto_ctx_ptr != nullptr INTERNAL ASSERT FAILED" (torch_npu's own tests profile this way:
test/trans_contiguous/*). The emulated device runs each op when it is called, on the host, so it has no device
events to time: its profile is Kineto's host trace (the state ``use_kineto=True`` selects, with the PrivateUse1
activity where Kineto has it), which is what those calls ask for here. Other devices keep PyTorch's profiler.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
from typing import Any

import torch

from .slot import backend_name

_original_init: Any = None


def install() -> None:
    """Once per process: profiles of the emulated device take Kineto's state (no C++ stubs to time with)."""
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


# Device activity in a trace ---------------------------------------------------------------------------------
# torch.profiler records the emulated device's ops as CPU events only: its kernels run on the host, inside
# PyTorch's "PythonSubclass" range of the wrapper's dispatch, and Kineto has no activity for a Python
# backend. While a torch.fl.profile() runs, the device-op hook (tensor.py) notes each op's device, stream and
# kind in issue order; the exported Chrome trace then gets what Kineto writes for a GPU: a process per device,
# a thread per stream, each kernel ("cat": "kernel") and host<->device copy ("cat": "gpu_memcpy") on it with
# the time of its dispatch span, a launch event on the CPU thread and an "ac2g" flow between the two.
_SUBCLASS = "PythonSubclass"
_LOOKAHEAD = 64  # ranges of other wrapper subclasses skipped at most between two of the device's ops


class KernelRecorder:
    """The ops issued on the emulated device while it is on (``with KernelRecorder() as r``): ``r.records``,
    one (thread id, op name, device index, stream id, copy kind or "", bytes) per op, in issue order."""

    def __init__(self) -> None:
        self.records: list[tuple[int, str, int, int, str, int]] = []

    def __enter__(self) -> KernelRecorder:
        from . import tensor

        tensor.set_device_op_hook("profile", self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        from . import tensor

        tensor.set_device_op_hook("profile", None)

    def _note(self, func: Any, args: tuple) -> None:
        if func is None or func.is_view or func.name() in _NO_KERNEL:
            return  # (tolist(), printing: no dispatched op; views and allocations: no kernel on a GPU either)
        from . import streams

        device = streams.state.tensor_type
        first = next((a for a in args if type(a) is device), None)
        index = first._index if first is not None else streams.state.current
        kind, nbytes = _copy_kind(func, args, device)
        self.records.append((threading.get_native_id(), func.name(), index,
                             streams.current_stream(index)._key[1], kind, nbytes))


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
        return "DtoH (Device -> Pageable)", args[0].element_size()
    if name == "aten::_to_copy" and args and type(args[0]) is device:
        return "DtoH (Device -> Pageable)", args[0].numel() * args[0].element_size()
    return "", 0


def _base(name: str) -> str:
    """aten::mm.default -> aten::mm (trace events name ops without the overload)."""
    return name.split(".", 1)[0]


def add_device_tracks(path: str, records: list[tuple[int, str, int, int, str, int]], device_type: str) -> int:
    """Add the recorded ops of the emulated device to the Chrome trace at `path` as device activity (see
    above); returns how many kernel and memcpy events were added. Each record is matched, in order, to the
    next "PythonSubclass" range of its thread whose enclosing op has its name; a range with another such
    range inside (a translated op: its sub-ops are the kernels) or a fallback's copies (its work ran on
    the host) is no kernel of its own."""
    with open(path) as file:
        trace = json.load(file)
    events = trace["traceEvents"]
    by_thread: dict[Any, list[dict]] = {}
    for event in events:
        if event.get("ph") == "X" and event.get("cat") in ("cpu_op", "user_annotation"):
            by_thread.setdefault(event["tid"], []).append(event)
    spans = []  # (record, PythonSubclass event, its enclosing op)
    parents: dict[int, dict | None] = {}
    for tid, thread_events in by_thread.items():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for event in thread_events:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < event["ts"] + event["dur"]:
                stack.pop()
            parents[id(event)] = stack[-1] if stack else None
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
    for thread_events in by_thread.values():
        for event in thread_events:
            if id(event) in matched or event["name"].startswith("fl::fallback"):
                parent = parents[id(event)]
                while parent is not None and id(parent) not in matched:
                    parent = parents[id(parent)]
                if parent is not None:
                    hosts.add(id(parent))
    added = 0
    correlation = itertools.count(1 << 20)
    streams_seen: set[tuple[int, int]] = set()
    units = [(record, span, op) for record, span, op in spans if id(span) not in hosts]
    for record, span, op in units:
        _, name, index, stream, copy, nbytes = record
        start = span["ts"]
        cid = next(correlation)
        pid = index
        streams_seen.add((index, stream))
        args = {"device": index, "stream": stream, "correlation": cid, "External id": op["args"].get("External id"),
                "emulated": "torch-fl: the time of the op's dispatch on the host"}
        if copy:
            args["bytes"] = nbytes
            device_event = {"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {copy}", "pid": pid, "tid": stream,
                            "ts": start, "dur": span["dur"], "args": args}
        else:
            device_event = {"ph": "X", "cat": "kernel", "name": _base(name), "pid": pid, "tid": stream, "ts": start,
                            "dur": span["dur"], "args": args}
        launch = {"ph": "X", "cat": "cuda_runtime", "name": "emuMemcpyAsync" if copy else "emuLaunchKernel",
                  "pid": span["pid"], "tid": span["tid"], "ts": start, "dur": min(span["dur"], 1.0),
                  "args": {"correlation": cid, "External id": op["args"].get("External id")}}
        flow = {"id": cid, "cat": "ac2g", "name": "ac2g"}
        events += [device_event, launch,
                   {**flow, "ph": "s", "pid": span["pid"], "tid": span["tid"], "ts": start},
                   {**flow, "ph": "f", "bp": "e", "pid": pid, "tid": stream, "ts": start}]
        added += 1
    for index in sorted({i for i, _ in streams_seen}):
        pid = index
        events += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                    "args": {"name": f"{device_type}:{index} (emulated by torch-fl)"}},
                   {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                    "args": {"labels": f"{device_type.upper()} {index}"}},
                   {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                    "args": {"sort_index": 5_000_000 + index}}]  # (after the CPU rows)
    for index, stream in sorted(streams_seen):
        events.append({"ph": "M", "name": "thread_name", "pid": index, "tid": stream,
                       "args": {"name": f"stream {stream}" + (" (default)" if stream == 0 else "")}})
    with open(path, "w") as file:
        json.dump(trace, file)
    return added
