"""Streams and events for every device: native objects where the device has them, host stand-ins elsewhere.

``torch.fl.Stream`` / ``torch.fl.Event`` return the device module's own Stream/Event (torch.cuda.Event,
torch.xpu.Stream, ... else torch.Stream/torch.Event) when the device's description says it has streams
or events, so there is no wrapper on the hot path. On the host CPU (sync submission) and single-queue
devices (``streams = false``, ``events = false``) they return host objects: work on one queue is already
ordered, and an event is a host clock reading taken after the device's queued work finished.

On an emulated chip the device module is the emulator's (``torch.npu``, ``torch.emu``): its streams and events
have an order of their own and defer what the host sees of non-blocking copies where the description says
``submission = "async"`` (routing/emu/streams.py, docs/streams.md).

The runtime facade (torch_fl.runtime) imports this module and re-exports Stream, Event and stream; both
ask device_calls.py for the device module and for synchronize, so neither imports the other.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from . import device_calls
from .device import description_for
from .errors import RuntimeUnsupportedError
from .routing.current import use_device

if TYPE_CHECKING:
    from .runtime import DeviceLike

__all__ = ["Event", "Stream", "stream"]

_log = logging.getLogger("torch_fl.runtime")

# What a stream or event object must offer to stand in for torch.fl.Stream / torch.fl.Event.
_STREAM_METHODS = ("synchronize", "query", "wait_stream", "wait_event", "record_event")
_EVENT_METHODS = ("record", "synchronize", "query", "wait", "elapsed_time")

_MISSING: Any = object()


def _construct(cls: Callable[..., Any], **kwargs: Any) -> Any:
    """cls(**kwargs) without the keywords it does not accept (torch.mps.Event takes enable_timing only)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return cls(**kwargs)
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return cls(**kwargs)
    dropped = {k: v for k, v in kwargs.items() if k not in params}
    if dropped:
        _log.debug("%s ignores %s", getattr(cls, "__qualname__", cls), dropped)
    return cls(**{k: v for k, v in kwargs.items() if k in params})


def _has_methods(obj: Any, names: tuple[str, ...]) -> bool:
    return all(callable(getattr(obj, name, None)) for name in names)


class _Structural(type):
    """isinstance() by capability, so native streams/events (torch.cuda.Event, torch.Stream, ...) that
    torch.fl.Stream / torch.fl.Event return also count as instances."""

    _methods: tuple[str, ...] = ()

    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(cls, obj) or (cls._methods != () and _has_methods(obj, cls._methods))


def _native_stream(dev: torch.device, priority: int) -> Any:
    if not description_for(dev).section("streams")["streams"]:
        return None
    module_cls = getattr(device_calls.device_module(dev), "Stream", None)
    if module_cls is not None and _has_methods(module_cls, _STREAM_METHODS):
        return _construct(module_cls, device=dev, priority=priority)
    generic = getattr(torch, "Stream", None)
    return generic(device=dev, priority=priority) if generic is not None else None


class Stream(metaclass=_Structural):
    """A queue of work on a device: torch.cuda.Stream-style.

    Where the description says the device has streams, this returns the native object (the device
    module's Stream, else torch.Stream), so there is no wrapper on the hot path. Otherwise (host CPU,
    single-queue devices such as MPS) it returns a host stream: work on it is already ordered, so
    wait_* are no-ops and synchronize()/query() synchronize the device.

    Args:
        device: the device (default torch.fl.device()).
        priority: stream priority, passed to native streams (lower is higher priority on CUDA).

    Example:
        >>> s = torch.fl.Stream()
        >>> with torch.fl.stream(s):
        ...     y = torch.ones(4) * 2
        >>> s.synchronize()
    """

    _methods = _STREAM_METHODS
    device: torch.device
    priority: int

    def __new__(cls, device: DeviceLike = None, priority: int = 0) -> Stream:
        dev = use_device(device)
        if cls is Stream:
            native = _native_stream(dev, priority)
            if native is not None:
                return native
        obj = super().__new__(cls)
        obj.device, obj.priority = dev, priority
        return obj

    def query(self) -> bool:
        """True: a host stream's work is done once synchronize returns (it blocks on async devices)."""
        device_calls.synchronize(self.device)
        return True

    def synchronize(self) -> None:
        device_calls.synchronize(self.device)

    def wait_stream(self, stream: Any) -> None:
        """No-op: a single queue is already ordered."""

    def wait_event(self, event: Any) -> None:
        """No-op: a single queue is already ordered."""

    def record_event(self, event: Any = None) -> Any:
        """Record `event` (a new torch.fl.Event when None) on this stream and return it."""
        event = event if event is not None else Event(device=self.device)
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return f"torch.fl.Stream(device={self.device}, host)"


def _native_event(dev: torch.device, enable_timing: bool, blocking: bool, interprocess: bool) -> Any:
    streams = description_for(dev).section("streams")
    if streams["submission"] == "sync" or not streams["events"]:
        return None  # host clock: exact for sync devices; the only clock where events are missing
    module_cls = getattr(device_calls.device_module(dev), "Event", None)
    if module_cls is not None and _has_methods(module_cls, _EVENT_METHODS):
        return _construct(module_cls, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)
    generic = getattr(torch, "Event", None)
    if generic is None:
        return None
    return generic(device=dev, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


class Event(metaclass=_Structural):
    """A marker in a device's queue, for timing and synchronisation: torch.cuda.Event-style.

    On async devices with events this returns the native object (the device module's Event, else
    torch.Event). On the host (sync submission) or where the description says events = false, it
    returns a host event: record() reads time.perf_counter_ns() (after synchronizing an async device,
    so the time is when queued work finished) and elapsed_time() is milliseconds between two records.

    Args:
        enable_timing: whether elapsed_time may be used (required, as on CUDA, so code tested on the
            CPU behaves the same on a GPU).
        blocking: passed to native events that accept it.
        interprocess: passed to native events that accept it.
        device: the device (default torch.fl.device()).

    Example:
        >>> start, end = torch.fl.Event(enable_timing=True), torch.fl.Event(enable_timing=True)
        >>> start.record(); y = torch.ones(256, 256) @ torch.ones(256, 256); end.record()
        >>> end.synchronize()
        >>> start.elapsed_time(end) >= 0
        True
    """

    _methods = _EVENT_METHODS
    device: torch.device
    enable_timing: bool
    _wait_for_device: bool
    _recorded_ns: int | None

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, *,
                device: DeviceLike = None) -> Event:
        dev = use_device(device)
        if cls is Event:
            native = _native_event(dev, enable_timing, blocking, interprocess)
            if native is not None:
                return native
        obj = super().__new__(cls)
        obj.device, obj.enable_timing, obj._recorded_ns = dev, enable_timing, None
        # Decided once: record() is inside timed regions, where a description lookup would be noise.
        obj._wait_for_device = not device_calls.is_sync(description_for(dev))
        return obj

    def record(self, stream: Any = None) -> None:
        """Mark now (after the device's queued work, on async devices)."""
        if self._wait_for_device:
            device_calls.synchronize(self.device)
        self._recorded_ns = time.perf_counter_ns()

    def query(self) -> bool:
        """True: host events complete when record() returns."""
        return True

    def synchronize(self) -> None:
        """No-op: record() already waited."""

    def wait(self, stream: Any = None) -> None:
        """No-op: record() already waited."""

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event's record() to `end_event`'s.

        Raises:
            RuntimeError: when either event lacks enable_timing=True or was never recorded.
        """
        end_ns = getattr(end_event, "_recorded_ns", _MISSING)
        if end_ns is _MISSING:
            raise TypeError(f"elapsed_time needs another host torch.fl.Event, got {type(end_event).__name__}")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("elapsed_time needs both events created with enable_timing=True")
        if self._recorded_ns is None or end_ns is None:
            raise RuntimeError("elapsed_time needs both events to be recorded first (call record())")
        return (end_ns - self._recorded_ns) / 1e6

    def __repr__(self) -> str:
        state = "recorded" if self._recorded_ns is not None else "not recorded"
        return f"torch.fl.Event(device={self.device}, host, {state})"


def stream(stream: Any) -> contextlib.AbstractContextManager[Any]:
    """Context manager that makes `stream` current for its device (no-op for None and host streams).

    Args:
        stream: a torch.fl.Stream (native or host) or None.

    Example:
        >>> with torch.fl.stream(torch.fl.Stream()):
        ...     pass
    """
    if stream is None or type.__instancecheck__(Stream, stream):
        return contextlib.nullcontext(stream)
    dev = getattr(stream, "device", None)
    dev_type = dev.type if isinstance(dev, torch.device) else getattr(stream, "device_type", None)
    module_ctx = getattr(getattr(torch, str(dev_type), None), "stream", None)
    if callable(module_ctx):
        return module_ctx(stream)
    if hasattr(stream, "__enter__"):
        return stream  # torch.Stream is its own context manager
    return _set_stream_context(stream)


@contextlib.contextmanager
def _set_stream_context(native: Any) -> Iterator[Any]:
    acc = getattr(torch, "accelerator", None)
    if acc is None or not hasattr(acc, "set_stream"):
        raise RuntimeUnsupportedError(f"torch.fl.stream: cannot make {native!r} current on torch "
                                      f"{torch.__version__}")
    previous = acc.current_stream(native.device)
    acc.set_stream(native)
    try:
        yield native
    finally:
        acc.set_stream(previous)
