"""Streams, events and non-blocking copies of the emulated device: time as an asynchronous chip has it.

Kernels of the emulated device run on the CPU when they are called, so the *device* side of every
stream is always up to date. What an asynchronous chip (``streams.submission = "async"``: CUDA, Ascend,
Cambricon, ...) defers is what the *host* sees: a ``non_blocking=True`` device-to-host copy lands in host
memory at some time before the next synchronisation that covers it. The emulator takes the worst case,
deterministically: the host destination holds a poison pattern (NaN for floating point, the largest value
for integers, True for bool) until a synchronisation covers the copy (``Stream.synchronize``,
``Event.synchronize`` or ``query`` of a later event, the device's ``synchronize``, a blocking copy or
``.item()`` on the same stream), so a missing sync shows as wrong numbers, as on the hardware. Device work
ordered after the copy (a later copy on the same stream, or on a stream that waited for its event, as
``save_on_cpu(pin_memory=True)``'s reload does) sees the real values. The other way, a non-blocking copy
from pinned host memory to the device reads its source when its stream is reached (the next op issued on
the stream or on one ordered after it, or a host synchronisation that covers it; tensor.py's
device-op hook), so a host buffer refilled before then sends the refilled values, as DMA would.

Order is kept as PyTorch's CUDA sanitizer keeps it (``torch.cuda._sanitizer.StreamSynchronizations``, used
here as it is): each stream has a vector clock; recording an event copies it, waiting on one merges it,
a host synchronisation merges into the host's clock. The sanitizer (sanitizer.py) reads the same clocks.

Streams and events are subclasses of PyTorch's ``torch.Stream`` / ``torch.Event`` with a valid C++ payload
(device type, index, stream id), so ``isinstance`` checks pass and a C++ call that receives one reads a real
object; their methods are this module's. A chip with ``submission = "sync"`` keeps one timeline: every copy
completes when issued, events are complete when recorded (its streams are still distinct objects, and
``torch.<chip>.current_stream()`` is the default stream outside a stream context).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import weakref
from typing import Any

import torch
from torch.cuda._sanitizer import StreamSynchronizations
from torch.utils._python_dispatch import _disable_current_modes

from .keyed import equal_by
from .slot import _no_device, backend_name, state

aten = torch.ops.aten

_HostStream: Any = torch.Stream
# PyTorch's own classes (events.py replaces the name torch.Event by a subclass once the backend registers)
_HostEvent: Any = next(c for c in torch.Event.__mro__ if c.__module__ == "torch" and c.__name__ == "Event")

StreamKey = tuple[int, int]  # (device index, stream id): stream id 0 is each device's default stream


class _Timeline:
    """The order of work on the emulated devices and what the host has seen complete."""

    def __init__(self) -> None:
        self.syncs = StreamSynchronizations()
        self.seq = 0
        self.pending: list[_Pending] = []  # deferred host-visible results (non-blocking D2H copies)
        self.landing: list[_Landing] = []  # non-blocking H2D copies from pinned memory not yet reached
        # host bytes (byte_span) -> the unfinished non-blocking copy that reads or writes them
        self.in_flight: dict[tuple[int, int, int], _InFlight] = {}
        self.lock = threading.RLock()
        self.listener: Any = None  # the sanitizer (sanitizer.py), told of every synchronisation

    def idle(self) -> bool:
        """Nothing deferred and no sanitizer: a synchronisation has nothing to update (the clocks matter
        only for results deferred later, which get later sequence numbers)."""
        return not self.pending and not self.in_flight and not self.landing and self.listener is None

    def tick(self, key: StreamKey) -> int:
        self.seq += 1
        self.syncs.update_seq_num(key, self.seq)
        return self.seq

    def covered(self, key: StreamKey, seq: int) -> bool:
        return seq <= self.syncs.host_sync_state.get(key, -1)

    def settle(self) -> None:
        """Complete every deferred result the host's clock covers now."""
        if not self.pending and not self.in_flight and not self.landing:
            return
        if self.landing:
            self.land([c for c in self.landing if self.covered(c.key, c.seq)])
        done = [p for p in self.pending if self.covered(p.key, p.seq)]
        if done:
            self.pending = [p for p in self.pending if not self.covered(p.key, p.seq)]
            for item in done:
                item.apply()
        for span in [span for span, f in self.in_flight.items() if self.covered(f.key, f.seq)]:
            del self.in_flight[span]

    def sync_stream(self, key: StreamKey, what: str = "") -> None:
        if self.idle():
            return
        with self.lock:
            self.syncs.all_streams_wait_for_stream(key)
            if self.listener is not None and what:
                self.listener.synchronized(what)
            self.settle()

    def sync_event(self, event: Event, what: str = "") -> None:
        if self.idle():
            return
        with self.lock:
            self.syncs.all_streams_wait_for_event(event._eid)
            if self.listener is not None and what:
                self.listener.synchronized(what)
            self.settle()

    def sync_device(self, what: str = "") -> None:
        if self.idle():
            return
        with self.lock:
            self.syncs.sync_all_streams()
            if self.listener is not None and what:
                self.listener.synchronized(what)
            self.settle()

    def outstanding(self, clock: dict[StreamKey, int]) -> list[_Pending]:
        """Deferred results a clock (an event's or a stream's) covers but the host has not seen."""
        return [p for p in self.pending if p.seq <= clock.get(p.key, -1)] + \
            [c for c in self.landing if c.seq <= clock.get(c.key, -1)] + \
            [f for f in self.in_flight.values() if f.seq <= clock.get(f.key, -1) and not self.covered(f.key, f.seq)]

    def land(self, copies: list[_Landing]) -> None:
        """The chip reaches these host-to-device copies: each reads its source now, in issue order."""
        if not copies:
            return
        self.landing = [c for c in self.landing if c not in copies]
        if not self.landing:
            tensor_module().set_device_op_hook("landing", None)
        for copy in copies:
            copy.land()

    def reached(self, key: StreamKey, touched: set[int]) -> None:
        """Device work is issued on stream `key`, on device memory `touched` (storage addresses): the
        host-to-device copies it is ordered after (its own stream's earlier ones, those before an event it
        waited for) have been read by the chip. A copy into memory the work touches lands too, though
        nothing orders it: that is a race between streams on the device, which the emulator, running
        kernels when issued, shows as the sanitizer's report, not as values."""
        with self.lock:
            self.land([c for c in self.landing
                       if c.ptr in touched or self.syncs.is_ordered_after(key, c.seq, c.key)])

    def reach(self, key: StreamKey, host: torch.Tensor) -> None:
        """Device work on stream `key` reads host tensor `host`: a deferred copy into it that the stream is
        ordered after has landed (the device side saw it complete)."""
        if not self.pending:
            return
        ptr = _storage_ptr(host)
        for item in list(self.pending):
            if item.ptr == ptr and self.syncs.is_ordered_after(key, item.seq, item.key):
                self.pending.remove(item)
                item.apply()


class _Pending:
    """A non-blocking device-to-host copy the host has not synchronised with: `dst` holds poison until
    apply() writes `values` into it."""

    __slots__ = ("dst", "key", "ptr", "seq", "values", "where")

    def __init__(self, key: StreamKey, seq: int, dst: torch.Tensor, values: torch.Tensor, where: str) -> None:
        self.key, self.seq, self.dst, self.values, self.where = key, seq, dst, values, where
        self.ptr = _storage_ptr(dst)

    def apply(self) -> None:
        # (the copy's own landing: no user op, so no dispatch mode (the sanitizer's) sees it)
        with torch.no_grad(), _disable_current_modes():
            self.dst.copy_(self.values)
        self.values = self.dst = None  # type: ignore[assignment]


class _Landing:
    """A non-blocking host-to-device copy from pinned host memory that its stream has not reached: land()
    reads the source, with the values the host has put there meanwhile, as the chip's DMA would."""

    __slots__ = ("dst", "key", "ptr", "seq", "src")

    def __init__(self, key: StreamKey, seq: int, dst: Any, src: torch.Tensor) -> None:
        self.key, self.seq, self.dst, self.src = key, seq, dst, src
        self.ptr = dst._data.untyped_storage().data_ptr()

    def land(self) -> None:
        # (the chip's read of the source: no user op, so no dispatch mode (the sanitizer's) sees it)
        with torch.no_grad(), _disable_current_modes():
            self.dst._data.copy_(self.src)
        self.dst = self.src = None


class _InFlight:
    """A host buffer an unfinished non-blocking copy reads (H2D source) or writes (D2H destination)."""

    __slots__ = ("key", "kind", "op", "seq", "stack")

    def __init__(self, key: StreamKey, seq: int, kind: str, op: str, stack: Any) -> None:
        self.key, self.seq, self.kind, self.op, self.stack = key, seq, kind, op, stack


timeline = _Timeline()


def tensor_module() -> Any:
    from . import tensor

    return tensor


def byte_span(tensor: torch.Tensor) -> tuple[int, int, int] | None:
    """(allocation: its storage's address, first byte, end byte) of the memory a tensor covers (None: no bytes).
    Views share their base's allocation, so `x[4:]` and `x` overlap and `x[:4]` and `x[4:]` do not; a strided
    view covers the bytes from its first element to its last."""
    ptr = tensor.data_ptr()
    if not ptr or not tensor.numel():
        return None
    size = tensor.itemsize
    start = tensor.storage_offset() * size
    if tensor.is_contiguous():
        length = tensor.nbytes
    else:
        length = (sum((n - 1) * stride for n, stride in zip(tensor.shape, tensor.stride(), strict=True)) + 1) * size
    return (ptr - start, start, start + length)


def _storage_ptr(tensor: torch.Tensor) -> int:
    try:
        return tensor.untyped_storage().data_ptr()
    except RuntimeError:
        return id(tensor)


def is_async() -> bool:
    """Whether the emulated chip's description says ``streams.submission = "async"``."""
    desc = state.description
    return desc is None or desc.section("streams")["submission"] != "sync"


# Streams --------------------------------------------------------------------------------------------------
_ids = itertools.count(1)
_local = threading.local()  # .current: {device index: Stream} of this thread (CUDA's current stream is per thread)
_defaults: dict[int, Stream] = {}


def _index(device: Any) -> int:
    if device is None:
        return state.current
    if isinstance(device, int):
        index = device
    else:
        where = torch.device(device) if not isinstance(device, torch.device) else device
        if where.type != backend_name():
            raise ValueError(f"{where} is not a device of the emulated chip ('{backend_name()}:N')")
        index = state.current if where.index is None else where.index
    if not 0 <= index < max(state.count, 1):
        raise _no_device(index)
    return index


@equal_by("_key")
class Stream(_HostStream):
    """``torch.<chip>.Stream`` of an emulated chip: an ordered queue of its own (see the module docstring).

    Args:
        device: the emulated device (default: the current one).
        priority: kept and reported; the emulator runs every stream's work when it is issued.
    """

    _key: StreamKey

    def __new__(cls, device: Any = None, priority: int = 0, **_: Any) -> Stream:
        return cls._make(_index(device), next(_ids), priority)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def _make(cls, index: int, stream_id: int, priority: int = 0) -> Stream:
        self = _HostStream.__new__(cls, stream_id=stream_id, device_index=index, device_type=_device_type())
        self._key = (index, stream_id)
        self._priority = priority
        with timeline.lock:
            if self._key not in timeline.syncs.current_sync_states:
                timeline.syncs.create_stream(self._key)
        if stream_id:
            weakref.finalize(self, _forget_stream, self._key)
        return self

    @property
    def priority(self) -> int:  # type: ignore[override]
        return self._priority

    def query(self) -> bool:
        """Whether the host has seen all of this stream's work complete; the first ask that finds a
        non-blocking copy still in flight answers False (the copy then lands), later asks True."""
        with timeline.lock:
            if timeline.outstanding(timeline.syncs.current_sync_states[self._key]):
                timeline.sync_stream(self._key)
                return False
            timeline.sync_stream(self._key)
            return True

    def synchronize(self) -> None:
        """Wait for this stream's work: its non-blocking copies land in host memory."""
        state.syncs += 1
        timeline.sync_stream(self._key, "Stream.synchronize()")

    def wait_event(self, event: Any) -> None:
        """Work issued on this stream from now on is ordered after `event`'s recorded work."""
        _check_event(event, "wait_event")
        with timeline.lock:
            timeline.syncs.stream_wait_for_event(self._key, event._eid)

    def wait_stream(self, stream: Any) -> None:
        """Work issued on this stream from now on is ordered after `stream`'s work issued so far."""
        if not isinstance(stream, Stream):
            raise TypeError(f"wait_stream takes a stream of the emulated chip, not {type(stream).__name__}")
        self.wait_event(stream.record_event())

    def record_event(self, event: Any = None) -> Event:
        """Record `event` (a new Event when None) on this stream and return it."""
        event = event if event is not None else Event(device=self.device)
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        self._previous = set_stream(self)
        return self

    def __exit__(self, *exc: object) -> None:
        set_stream(self._previous)

    def __repr__(self) -> str:
        return f"<torch.{backend_name()}.Stream device={self.device} stream_id={self._key[1]}>"

    @property
    def cuda_stream(self) -> int:
        """A stable handle (CUDA code and CSAN print it): the stream id."""
        return self._key[1]


def _forget_stream(key: StreamKey) -> None:
    """A stream no longer referenced: its clock goes (each new stream copies the host's clock, so keeping
    every stream's would grow with the square of the streams a program makes, one per step in some)."""
    try:
        with timeline.lock:
            # (the sanitizer needs every stream's last clock: an access of it is ordered by later syncs)
            if timeline.listener is not None or any(p.key == key for p in timeline.pending) or \
                    any(f.key == key for f in timeline.in_flight.values()) or \
                    any(c.key == key for c in timeline.landing):
                return
            timeline.syncs.current_sync_states.pop(key, None)
            timeline.syncs.host_sync_state.pop(key, None)
    except Exception:  # (at interpreter exit)
        pass


def _device_type() -> int:
    return int(torch._C._autograd.DeviceType.PrivateUse1)  # (c10::DeviceType::PrivateUse1 = 20)


def default_stream(device: Any = None) -> Stream:
    """The device's default stream (stream id 0), the same object on every call."""
    index = _index(device)
    stream = _defaults.get(index)
    if stream is None:
        stream = _defaults[index] = Stream._make(index, 0)
    return stream


def current_stream(device: Any = None) -> Stream:
    """This thread's current stream of the device: its default stream outside any stream context."""
    index = _index(device)
    current = getattr(_local, "current", None)
    stream = current.get(index) if current else None
    return stream if stream is not None else default_stream(index)


def current_key(index: int) -> StreamKey:
    """``current_stream(index)._key`` for the index of an existing device, without its checks (the
    sanitizer's ask at every op)."""
    current = getattr(_local, "current", None)
    stream = current.get(index) if current else None
    if stream is None:
        stream = _defaults.get(index) or default_stream(index)
    return stream._key


def set_stream(stream: Any) -> Stream | None:
    """Make `stream` current for its device in this thread; returns the stream it replaces (None: no-op)."""
    if stream is None:
        return None
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream takes a stream of the emulated chip (torch.{backend_name()}.Stream), "
                        f"not {type(stream).__name__}")
    index = stream._key[0]
    previous = current_stream(index)
    current = getattr(_local, "current", None)
    if current is None:
        current = _local.current = {}
    current[index] = stream
    return previous


class StreamContext:
    """``torch.<chip>.stream(s)``: `s` current for its device inside the block (None: no-op)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._previous: Stream | None = None

    def __enter__(self) -> Any:
        self._previous = set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            set_stream(self._previous)


def stream(stream: Any) -> StreamContext:
    return StreamContext(stream)


def synchronize(device: Any = None) -> None:
    """The device's synchronize: every stream's work, every deferred copy, lands."""
    state.syncs += 1
    timeline.sync_device("synchronize()")


# Events ---------------------------------------------------------------------------------------------------
_event_ids = itertools.count(1)


def _check_event(event: Any, what: str) -> None:
    if not isinstance(event, Event):
        raise TypeError(f"{what} takes an event of the emulated chip (torch.{backend_name()}.Event, "
                        f"torch.Event(device='{backend_name()}')), not {type(event).__module__}."
                        f"{type(event).__qualname__}")


def elapsed_ms(start_ns: int | None, end_ns: int | None, timed: bool) -> float:
    """What `elapsed_time` of an emulated chip's event answers (this module's and module.py's synchronous
    one): milliseconds of the host clock between two records, as CUDA's events give. `timed`: both events
    were created with enable_timing=True."""
    if not timed:
        raise RuntimeError("Events were not created with enable_timing=True: create both with "
                           "enable_timing=True to time them")
    if start_ns is None or end_ns is None:
        raise RuntimeError("elapsed_time needs both events to be recorded first (call record())")
    return (end_ns - start_ns) / 1e6


class Event(_HostEvent):
    """``torch.<chip>.Event`` of an emulated chip: a marker in a stream's order (see the module docstring).

    record() takes the stream's clock; synchronize() makes the host wait for it (deferred copies before it
    land); wait(stream) orders the stream after it; elapsed_time() is the host clock between two records
    (kernels run when they are issued, so that is the time their work took).
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, *,
                device: Any = None) -> Event:
        index = _index(device)
        self = _HostEvent.__new__(cls, torch.device(backend_name(), index), enable_timing=enable_timing,
                                  blocking=blocking, interprocess=interprocess)
        self._where = torch.device(backend_name(), index)
        self._eid = ("event", next(_event_ids))
        self._timing = enable_timing
        self._ns: int | None = None
        self._stream: Stream | None = None
        with timeline.lock:
            timeline.syncs.create_event(self._eid)
        weakref.finalize(self, _forget_event, self._eid)
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def enable_timing(self) -> bool:
        return self._timing

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        """The event's device (PyTorch's C++ event knows its index only once recorded)."""
        return self._where

    def record(self, stream: Any = None) -> None:
        """Mark the work issued on `stream` (the current stream when None) so far."""
        where = stream if stream is not None else current_stream(self.device)
        if not isinstance(where, Stream):
            raise TypeError(f"record takes a stream of the emulated chip, not {type(where).__name__}")
        with timeline.lock:
            timeline.syncs.record_state(self._eid, where._key)
        self._stream = where
        self._ns = time.perf_counter_ns()

    def query(self) -> bool:
        """Whether the recorded work is complete for the host; the first ask that finds a non-blocking copy
        before it still in flight answers False (the copy then lands), later asks True."""
        with timeline.lock:
            if timeline.outstanding(timeline.syncs.recorded_sync_states.get(self._eid, {})):
                timeline.sync_event(self)
                return False
            timeline.sync_event(self)
            return True

    def synchronize(self) -> None:
        """Wait for the recorded work: deferred copies before it land."""
        state.syncs += 1
        timeline.sync_event(self, "Event.synchronize()")

    def wait(self, stream: Any = None) -> None:
        """Order `stream`'s later work (the current stream's when None) after the recorded work."""
        where = stream if stream is not None else current_stream(self.device)
        if not isinstance(where, Stream):
            raise TypeError(f"wait takes a stream of the emulated chip, not {type(where).__name__}")
        where.wait_event(self)

    def elapsed_time(self, end_event: Any) -> float:
        """Milliseconds from this event's record() to `end_event`'s."""
        return elapsed_ms(self._ns, getattr(end_event, "_ns", None),
                          self._timing and getattr(end_event, "_timing", False))

    def __repr__(self) -> str:
        return f"<torch.{backend_name()}.Event device={self.device} {'recorded' if self._ns else 'not recorded'}>"


def _forget_event(eid: Any) -> None:
    try:
        with timeline.lock:
            timeline.syncs.recorded_sync_states.pop(eid, None)
    except Exception:  # (at interpreter exit)
        pass


def stream_of(stream: Any) -> Stream:
    """The emulated Stream a C++ ``c10::Stream`` round-tripped through the dispatcher stands for
    (``record_stream``'s argument arrives as a fresh torch.Stream with the same id)."""
    if isinstance(stream, Stream):
        return stream
    index, sid = int(stream.device_index), int(stream.stream_id)
    if sid == 0:
        return default_stream(index)
    return _StreamRef(index, sid)  # type: ignore[return-value]


class _StreamRef:
    """A stream known by its key only (record_stream of a stream the program no longer holds)."""

    def __init__(self, index: int, sid: int) -> None:
        self._key = (index, sid)


# Forked children ----------------------------------------------------------------------------------------
def _after_fork_in_child() -> None:
    """Under the sanitizer, a child forked after the device was used cannot use it (CUDA, torch_npu,
    torch_mlu alike): every device call raises the vendor's error at once, as on the chip (a DataLoader
    worker's device work). Without it the child computes on the host as the parent does (the emulator's
    own tests fork so, as a crash sandbox)."""
    if timeline.listener is None or not (any(state.peak) or any(state.live) or state.h2d_calls):
        return
    desc = state.description
    kind = (desc.device_type if desc is not None else backend_name()).upper()
    message = (f"Cannot re-initialize {kind} in forked subprocess. To use {kind} with multiprocessing, you must "
               f"use the 'spawn' start method")
    device = state.tensor_type

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(message)

    device.__torch_dispatch__ = classmethod(refuse)
    device.__new__ = staticmethod(refuse)
    module = getattr(torch, backend_name(), None)
    if module is not None:
        type(module)._is_in_bad_fork = staticmethod(lambda: True)


# Installation -------------------------------------------------------------------------------------------


def _emulated(device: Any) -> bool:
    if device is None or isinstance(device, int):
        current = torch.accelerator.current_accelerator()
        return current is not None and current.type == backend_name()
    if isinstance(device, Stream):
        return True
    try:
        return torch.device(device).type == backend_name()
    except (RuntimeError, TypeError):
        return False


class _StreamMeta(type(_HostStream)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _HostStream)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _HostStream)


class TorchStream(_HostStream, metaclass=_StreamMeta):
    """``torch.Stream`` once the emulated backend is registered: ``torch.Stream(device="npu")`` (or no device,
    with the emulated chip the current accelerator) is a new stream of the chip (PyTorch's constructor asks
    the device guard, which a Python backend cannot give streams: every one was stream 0); every other call,
    and isinstance checks, are PyTorch's."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        if "stream_id" not in kwargs and len(args) <= 1:
            device = args[0] if args else kwargs.get("device")
            if _emulated(device) and not isinstance(device, Stream):
                return Stream(device if device is not None else None, kwargs.get("priority", 0))
        return _HostStream(*args, **kwargs)


def _accelerator_entry(original: Any, emulated: Any) -> Any:
    def entry(device: Any = None) -> Any:
        return emulated(device) if _emulated(device) else original(device)

    entry.__name__ = entry.__qualname__ = original.__name__
    entry.__doc__ = original.__doc__
    return entry


def _script_as(wrapper: Any, name: str) -> None:
    """TorchScript compiles `torch.NAME(...)` as the aten op of its builtin table, which holds the functions of
    torch's namespace by identity: the wrapper is that function now, so it must be the same builtin (else
    scripting any code that calls torch.zeros_like & co. fails: 'Could not get qualified name')."""
    from torch.jit import _builtins

    _builtins._builtin_ops.append((wrapper, f"aten::{name}"))
    if _builtins._builtin_table is not None:  # (built already: add to it; else it is built from the list)
        _builtins._builtin_table[id(wrapper)] = f"aten::{name}"


def install() -> None:
    """Once, with the backend: torch.<chip>'s streams and events, torch.Stream and torch.accelerator's stream
    calls on the emulated device and the forked-child check (stream_copies.install: the copies and pinned memory)."""
    module_class = type(getattr(torch, backend_name()))
    for name, value in (("Stream", Stream), ("Event", Event), ("StreamContext", StreamContext),
                        ("current_stream", staticmethod(current_stream)),
                        ("default_stream", staticmethod(default_stream)),
                        ("set_stream", staticmethod(set_stream)), ("stream", staticmethod(stream)),
                        ("synchronize", staticmethod(synchronize))):
        setattr(module_class, name, value)

    torch.Stream = TorchStream  # type: ignore[misc]
    acc = torch.accelerator
    acc.current_stream = _accelerator_entry(acc.current_stream, current_stream)
    acc.synchronize = _accelerator_entry(acc.synchronize, synchronize)
    original_set = acc.set_stream

    def set_accelerator_stream(stream: Any) -> None:
        if isinstance(stream, Stream):
            set_stream(stream)
        else:
            original_set(stream)

    acc.set_stream = set_accelerator_stream
    os.register_at_fork(after_in_child=_after_fork_in_child)
