"""The stream sanitizer of the emulated device: every race between streams, named with both accesses.

PyTorch's CUDA Stream Sanitizer (``TORCH_CUDA_SANITIZER=1``, torch/cuda/_sanitizer.py) finds kernels of two
streams touching one tensor with no synchronisation between them, on a real CUDA GPU only. This is the same
check on every emulated chip, built on CSAN: its ``ArgumentHandler``'s reading of which tensors an op reads
and writes from the op's schema, its ``EventHandler``'s conflict rule, decided with the vector clocks
streams.py keeps for the emulated chip (one ``StreamSynchronizations`` shared by both, so the copies that
streams.py defers and the races found here follow one order), and its ``Access`` in the reports.

What it adds to CSAN:

- an access is kept by the bytes it covers in its allocation (CSAN's by the tensor's data pointer), so a view
  races with its base and disjoint views do not;
- the collectives of the emulated process group (dist.py) are kernels of the current stream, and their
  work's ``wait()`` orders the stream then current after them, as NCCL's;

- a report names the op, the stream (and device), the tensor argument names and the *user's* source line
  of both accesses (frames inside torch and torch-fl left out), and the fix;
- memory freed while another stream may still use it, without ``record_stream``: on a caching allocator
  the next allocation on the allocating stream gets that memory while the other stream still reads it;
- a host read of the destination of an unfinished ``non_blocking=True`` device-to-host copy, and a host
  write to the source of an unfinished non-blocking host-to-device copy;
- host synchronisations counted by source line (``.item()``, ``nonzero``, blocking copies to the host,
  ``synchronize()``): each one serialises a chip that submits asynchronously.

Enabled by ``sanitize()`` below (``torch.fl.sanitize()``; ``FL_SANITIZE=streams`` for a whole process):

    with sanitize():                   # or check = sanitize(); ...; check.close()
        train_step()                   # a race raises a RuntimeError naming both accesses

Off, it costs nothing: nothing of it is on the dispatch path.
"""

from __future__ import annotations

import collections
import functools
import linecache
import os
import sys
import traceback
import weakref
from typing import Any

import torch
from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
from torch.cuda._sanitizer import (
    FACTORY_FUNCTION_REGEX,
    Access,
    AccessType,
    ArgumentHandler,
    EventHandler,
    UnsynchronizedAccessError,
)
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from . import streams
from .slot import backend_name, state

aten = torch.ops.aten

# ops after which the host holds a device value: each waits for the device (a host synchronisation)
_HOST_SYNC_OPS = {aten._local_scalar_dense.default: "item()", aten.nonzero.default: "nonzero (its size)",
                  aten.is_nonzero.default: "bool(tensor)", aten.equal.default: "torch.equal"}


def race_error(reports: list[str]) -> RuntimeError:
    """What a race raises: a StreamRaceError (a RuntimeError, as PyTorch's errors on a chip are) carrying the
    reports in ``.reports``; starts with ``torch-fl stream sanitizer:``."""
    from ...errors import StreamRaceError

    return StreamRaceError(reports)


class _Op:
    """What the sanitizer reads of an op, once (a schema's ``arguments`` is a new list of new objects at every
    access, and an OpOverload hashes in Python): (name, writes, metadata only) per argument, whether its result
    is metadata only (None: no result), whether it is a view op, the host synchronisation it makes, and whether
    it may be a blocking copy between host and device."""

    __slots__ = ("arguments", "named", "returns", "schema", "sync", "transfer", "views")

    def __init__(self, func: Any) -> None:
        schema = self.schema = func._schema
        is_factory = bool(FACTORY_FUNCTION_REGEX.match(schema.name))  # (CSAN's rule)
        self.arguments = tuple(
            (a.name, a.alias_info is not None and a.alias_info.is_write,
             is_factory or (a.alias_info is not None and not a.alias_info.is_write)) for a in schema.arguments)
        self.named = {spec[0]: spec for spec in self.arguments}
        returns = schema.returns
        alias = returns[0].alias_info if returns else None
        self.returns = None if not returns else is_factory or (alias is not None and not alias.is_write)
        # a view op: its result is memory of its input's allocation, not a new allocation
        self.views = bool(returns) and not is_factory and alias is not None and not alias.is_write
        self.sync = _HOST_SYNC_OPS.get(func)
        self.transfer = func in (aten._local_scalar_dense.default, aten.copy_.default, aten._to_copy.default)


_ops: dict[int, _Op] = {}  # id(op) -> what the sanitizer reads of it (ops are never freed)


Span = tuple[int, int, int]  # (allocation: its storage's address, first byte, end byte) of a tensor's memory


_span = streams.byte_span  # (CSAN keys an access by the tensor's data pointer: a view at an offset is another
# tensor there, and its race with its base is missed)


class _Accesses(ArgumentHandler):
    """CSAN's argument reader (its fields, filled as its ``parse_inputs`` / ``parse_outputs`` fill them), for
    tensors of the emulated device (CSAN's asks ``is_cuda``), keyed by the tensor's span of its allocation
    (`_span`; CSAN's by its data pointer), walking the op's arguments with a loop of its own (CSAN's pytree
    walk is a third of a sanitized step)."""

    def __init__(self) -> None:  # (ArgumentHandler's fields, without its __init__ call: one per op)
        self.dataptrs_read: set[Span] = set()
        self.dataptrs_written: set[Span] = set()
        self.tensor_aliases: dict[Span, list[str]] = {}
        self.outputs: set[Span] = set()
        self.output_tensors: dict[Span, Any] = {}  # span -> an output tensor there (its storage is watched)
        self.fresh: set[Span] = set()  # outputs in none of the arguments: new memory, unless the op is a view

    def read_arguments(self, op: _Op, args: tuple, kwargs: dict) -> None:
        device = state.tensor_type
        specs = op.arguments
        handle = self._handle_argument
        for position, value in enumerate(args):
            if position >= len(specs):
                break
            if type(value) is device:
                spec = specs[position]
                handle(value, spec[1], spec[2], spec[0])
            elif type(value) is list or type(value) is tuple:
                spec = specs[position]
                for item in value:
                    if type(item) is device:
                        handle(item, spec[1], spec[2], spec[0])
        if kwargs:
            named = op.named
            for name, value in kwargs.items():
                spec = named.get(name)
                if spec is None:
                    continue
                for item in (value if type(value) is list or type(value) is tuple else (value,)):
                    if type(item) is device:
                        handle(item, spec[1], spec[2], spec[0])

    def read_outputs(self, op: _Op, outputs: Any) -> None:
        if op.returns is None:
            return
        metadata_only = op.returns
        for value in _tensors(outputs, nested=True):
            self._handle_argument(value, not metadata_only, metadata_only, None, True)

    def _handle_argument(self, value: Any, is_write: bool, metadata_only: bool, name: str | None = None,
                         is_output: bool = False) -> None:
        if metadata_only and not is_output:
            return  # (an input the op reads the shape of, or returns a view of: no access, nothing to know)
        # (`_span`, inline: this runs for every tensor of every op, foreach ops' lists included)
        data = value._data
        ptr = data.data_ptr()
        if not ptr:
            return  # (no memory: nothing to race on)
        size = data.itemsize
        start = data.storage_offset() * size
        if data.is_contiguous():
            end = start + data.nbytes
        else:
            span = _span(data)
            if span is None:
                return
            end = span[2]
        if end == start:
            return
        span = (ptr - start, start, end)
        if is_write:
            self.dataptrs_written.add(span)
        elif not metadata_only:
            self.dataptrs_read.add(span)
        aliases = self.tensor_aliases.get(span)
        if aliases is None:
            aliases = self.tensor_aliases[span] = []
            if is_output:
                self.fresh.add(span)
        if name is not None:
            aliases.append(name)
        if is_output:
            self.outputs.add(span)
            self.output_tensors[span] = value


_INTERNAL = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))) + os.sep)  # torch's directory and torch_fl's


_internal_files: dict[str, bool] = {}  # file name -> whether it is torch's or torch-fl's


def _user_stack() -> tuple[tuple[Any, int], ...]:
    """The innermost frame outside torch and torch-fl, as ((code, instruction offset),): its line is found, and
    its text read, only when a report prints it (`_user_frame`; a frame's f_lineno decodes its code's line table
    at every ask, which in a long function or module costs more than the rest of the check). CSAN extracts the
    whole stack at every kernel, which alone makes a step several times slower."""
    frame = sys._getframe(2)
    while frame is not None:
        # (keyed by the file name, a string that keeps its hash: a code object hashes its contents at every ask)
        filename = frame.f_code.co_filename
        internal = _internal_files.get(filename)
        if internal is None:
            internal = _internal_files[filename] = filename.startswith(_INTERNAL)
        if not internal:
            break
        frame = frame.f_back
    return () if frame is None else ((frame.f_code, frame.f_lasti),)


# An access, as CSAN's `Access` holds it (its fields, in its order: type, seq_num, stream, operator, aliases,
# is_output, stack_trace) but a tuple of tuples and numbers, the type a bool (a write): one is made for every
# tensor of every op and many are kept, and such a tuple leaves the garbage collector's lists at its first
# collection (a dataclass, or a tuple holding a list or an enum, stays tracked: the collector's passes over the
# kept accesses were most of this handler's cost). `_access(record)` when a report prints it.
Record = tuple[bool, int, Any, Any, tuple[str, ...], bool, tuple[Any, ...]]
_SEQ, _STREAM = 1, 2


def _access(record: Record) -> Access:
    write, seq, stream, operator, aliases, is_output, stack = record
    return Access(AccessType.WRITE if write else AccessType.READ, seq, stream, operator, list(aliases), is_output,
                  list(stack))


class _Info:
    """CSAN's TensorInfo of one span: its last write and the reads since."""

    __slots__ = ("reads", "write")

    def __init__(self) -> None:
        self.write: Record | None = None
        self.reads: list[Record] = []


class _Handler(EventHandler):
    """CSAN's event handler (its clocks and its conflict rule: a read conflicts with the last write, a write
    with the reads since the last write, or with it when there were none; an access is ordered after another
    when its stream's clock has passed the other's sequence number) with `_user_stack`, over spans of
    allocations: an access is checked against the accesses of every span of its allocation that overlaps it
    (most allocations are only ever accessed whole: one span, one check)."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: dict[int, set[Span]] = {}  # allocation -> its spans accessed so far
        self.infos: dict[Span, _Info] = {}

    def _overlapping(self, span: Span) -> Any:
        """The spans of `span`'s allocation that overlap it, itself included (made known if it is new)."""
        known = self.spans.get(span[0])
        if known is None:
            self.spans[span[0]] = {span}
            self.infos[span] = _Info()
            return (span,)
        if span not in known:
            known.add(span)
            self.infos[span] = _Info()
        if len(known) == 1:
            return (span,)
        start, end = span[1], span[2]
        return [other for other in known if other[1] < end and start < other[2]]

    def _handle_kernel_launch(self, stream: Any, read_only: set[Span], read_write: set[Span], outputs: set[Span],
                              operator: Any, tensor_aliases: dict[Span, list[str]]) -> list[Any]:
        errors: list[Any] = []
        infos = self.infos
        self.seq_num = seq = self.seq_num + 1
        clocks = self.syncs.current_sync_states
        clock = clocks.get(stream)
        if clock is None:
            self.syncs.create_stream(stream)
            clock = clocks[stream]
        clock[stream] = seq
        stack = _user_stack()
        for span in read_only:
            current = (False, seq, stream, operator, tuple(tensor_aliases[span]), span in outputs, stack)
            for other in self._overlapping(span):
                previous = infos[other].write
                if previous is not None and previous[_STREAM] != stream and \
                        previous[_SEQ] > clock.get(previous[_STREAM], -1):
                    errors.append(UnsynchronizedAccessError(span, None, _access(current), _access(previous)))
            infos[span].reads.append(current)
        for span in read_write:
            current = (True, seq, stream, operator, tuple(tensor_aliases[span]), span in outputs, stack)
            for other in self._overlapping(span):
                info = infos[other]
                for previous in info.reads or (info.write,):
                    if previous is not None and previous[_STREAM] != stream and \
                            previous[_SEQ] > clock.get(previous[_STREAM], -1):
                        errors.append(UnsynchronizedAccessError(span, None, _access(current), _access(previous)))
            info = infos[span]
            info.write, info.reads = current, []
        return errors

    def _handle_memory_allocation(self, data_ptr: int) -> None:
        # a new allocation at this address: what was known of the memory there before is gone (no stack: the
        # reports name the two accesses, not the allocation)
        self.forget(data_ptr)

    def forget(self, allocation: int) -> list[_Info]:
        """Drop what is known of an allocation's accesses; returns their records."""
        infos = self.infos
        return [info for span in self.spans.pop(allocation, ()) if (info := infos.pop(span, None)) is not None]


def _user_frame(stack: Any) -> str:
    """The innermost frame of the user's code (outside torch, torch-fl and the test runner), from a
    traceback stack or `_user_stack`'s list."""
    for frame in reversed(list(stack)):
        if hasattr(frame, "filename"):
            filename, lineno, name = frame.filename, frame.lineno, frame.name
        else:
            code, offset = frame
            filename, name = code.co_filename, code.co_name
            lineno = next((line for start, end, line in code.co_lines() if start <= offset < end and line), 0)
        path = filename.replace("\\", "/")
        if any(part in path for part in ("/torch/", "/torch_fl/", "/_pytest/", "/pluggy/", "<frozen")):
            continue
        line = linecache.getline(filename, lineno).strip()
        return f"{filename}:{lineno} in {name}" + (f": {line}" if line else "")
    return "(no frame outside torch and torch-fl)"


def stream_name(key: Any) -> str:
    if not isinstance(key, tuple):
        return f"stream {key}"
    index, sid = key
    where = f"{backend_name()}:{index}"
    return f"the default stream of {where}" if sid == 0 else f"stream {sid} of {where}"


def _describe(access: Access) -> str:
    what = str(access.type)
    if access.aliases:
        what += " argument " + ", ".join(repr(a) for a in access.aliases)
        if access.is_output:
            what += " and"
    if access.is_output:
        what += " its output"
    op = access.operator.name if hasattr(access.operator, "name") else str(access.operator)
    return f"{op} on {stream_name(access.stream)}, {what}\n        at {_user_frame(access.stack_trace)}"


class Sanitizer:
    """The live check: a dispatch mode over every op, and the bookkeeping streams.py reports to."""

    def __init__(self, raise_errors: bool = True) -> None:
        self.raise_errors = raise_errors
        self.reports: list[str] = []
        self.handler = _Handler()
        self.handler.syncs = streams.timeline.syncs  # (one order for the deferred copies and the check)
        self.recorded: dict[int, set[Any]] = collections.defaultdict(set)  # allocation -> streams of record_stream
        self.watched: dict[int, Any] = {}  # allocation -> weak reference to its storage (its free is checked)
        self.deferred: list[str] = []  # found where no exception can be raised (a free): raised at the next op
        self.host_sync_sites: collections.Counter[tuple[str, str]] = collections.Counter()
        self.mode = _Mode(self)
        self.active = False

    # what streams.py asks
    def stack(self) -> tuple[tuple[Any, int], ...]:
        return _user_stack()

    def synchronized(self, what: str) -> None:
        self.note_host_sync(what)

    def record_stream(self, tensor: Any, stream: Any) -> None:
        # keyed by the allocation, not the tensor's own pointer: CUDA's record_stream marks the whole block,
        # so recording a view at an offset (a micro-batch chunk, as torchgpipe does) covers its base tensor
        self.recorded[_allocation(tensor)].add(stream._key)

    # reports
    def report(self, text: str, *, now: bool = True) -> None:
        print(text, file=sys.stderr)
        self.reports.append(text)
        if not self.raise_errors:
            return
        if now:
            raise race_error([text])
        self.deferred.append(text)

    def raise_deferred(self) -> None:
        if self.deferred:
            found, self.deferred = self.deferred, []
            raise race_error(found)

    def note_host_sync(self, what: str) -> None:
        self.host_sync_sites[(what, _user_frame(_user_stack()))] += 1

    def host_syncs(self) -> list[dict[str, Any]]:
        """Host synchronisations seen so far, by source line, most frequent first."""
        return [{"what": what, "where": where, "count": count}
                for (what, where), count in self.host_sync_sites.most_common()]

    # the check
    def launch(self, operator: Any, index: int, accesses: _Accesses, fresh: set[Span], views: bool = False) -> None:
        """One kernel (`operator`: its schema, or what names a collective) issued on the current stream of
        device `index`, with its accesses; `fresh`: the spans of its outputs that are new memory (none of a view
        op: its result is memory of its input's allocation)."""
        timeline = streams.timeline
        key = streams.current_key(index)
        allocated: dict[int, Any] = {}
        if fresh:
            if views:
                # (a view at a new pointer is not an allocation: counting it one forgot the accesses made through
                # the allocation before, and freed it on the stream that sliced it)
                for span in fresh:
                    if span[0] not in self.watched:  # (allocated before the check began: its stream is unknown)
                        self._watch(accesses.output_tensors[span], span[0], key)
            else:
                for span in fresh:
                    allocated.setdefault(span[0], accesses.output_tensors[span])
        written = accesses.dataptrs_written
        read = accesses.dataptrs_read - written if written else accesses.dataptrs_read
        handler = self.handler
        with timeline.lock:
            for allocation in allocated:
                handler._handle_memory_allocation(allocation)
                self.recorded.pop(allocation, None)  # (a record_stream of an earlier tensor at this address)
            handler.seq_num = timeline.seq
            errors = handler._handle_kernel_launch(key, read, written, accesses.outputs, operator,
                                                   accesses.tensor_aliases)
            timeline.seq = handler.seq_num
        for allocation, tensor in allocated.items():
            self._watch(tensor, allocation, key)
        for error in errors:
            self.report(
                f"torch-fl stream sanitizer: a data race on a tensor of {backend_name()}:{index}\n"
                f"  now:    {_describe(error.current_access)}\n"
                f"  before: {_describe(error.previous_access)}\n"
                f"  Nothing orders the second access after the first: the two streams may run them at the same "
                f"time on the chip.\n"
                f"  Fix: make {stream_name(error.current_access.stream)} wait for the other "
                f"(current.wait_stream(other), or event = other.record_event() then current.wait_event(event)), "
                f"or synchronize the other stream before."
                + (" After a collective issued with async_op=True: work.wait() while the stream that uses its "
                   "tensors is current." if isinstance(error.previous_access.operator, _Collective) else ""))

    def collective(self, name: str, reads: list[Any], writes: list[Any]) -> Any:
        """A collective of routing/emu/dist.py reads `reads` and writes `writes` (tensors of the emulated
        device): checked as a kernel on the current stream, as NCCL's runs on its stream after waiting for the
        current one. Returns an event recorded after it (its work's wait() makes the then current stream wait
        for it, as NCCL's work.wait() does), or None when no tensor of the emulated device is in it."""
        accesses = _Accesses()
        for tensor in writes:
            accesses._handle_argument(tensor, True, False, "output" if reads else "tensor")
        for tensor in reads:
            accesses._handle_argument(tensor, False, False, "input")
        device = [t for t in (*writes, *reads) if type(t) is state.tensor_type]
        if not device:
            return None
        index = device[0]._index
        self.launch(_Collective(name), index, accesses, set())
        return streams.current_stream(index).record_event()

    def _watch(self, tensor: Any, allocation: int, key: Any) -> None:
        """Check the free of `tensor`'s allocation, made on stream `key`, when its storage goes."""
        try:
            storage = tensor._data.untyped_storage()
        except RuntimeError:
            return
        # (a weak reference with a callback, kept here: weakref.finalize costs several times more per tensor)
        self.watched[allocation] = weakref.ref(storage, functools.partial(_freed, weakref.ref(self), allocation,
                                                                          key))

    def freed(self, allocation: int, key: Any) -> None:
        """The memory of `allocation` (allocated on stream `key`) is free: was every access of it, through
        any of its tensors, ordered before the allocating stream, or recorded with record_stream?"""
        found = self.handler.forget(allocation)
        recorded = self.recorded.pop(allocation, set())
        if not found:
            return  # (most frees: nothing used it since the check began)
        syncs = self.handler.syncs
        for record in [a for info in found for a in (info.write, *info.reads)]:
            if record is None or record[_STREAM] == key or record[_STREAM] in recorded:
                continue
            if syncs.is_ordered_after(key, record[_SEQ], record[_STREAM]):
                continue
            access = _access(record)
            self.report(
                f"torch-fl stream sanitizer: memory of {backend_name()}:{key[0]} freed while another stream may "
                f"still use it\n"
                f"  allocated on {stream_name(key)}; last used by {_describe(access)}\n"
                f"  On the chip the caching allocator gives this memory to the next allocation on "
                f"{stream_name(key)} at once, while {stream_name(access.stream)} may still be reading or "
                f"writing it.\n"
                f"  Fix: tensor.record_stream(that stream) after using it there, or make {stream_name(key)} "
                f"wait for it (wait_stream / wait_event) before the tensor is freed.", now=False)
            return

    def check_host(self, func: Any, args: tuple, kwargs: dict) -> None:
        """A host op: does it read or write a host buffer an unfinished non-blocking copy uses?"""
        in_flight = streams.timeline.in_flight
        schema = func._schema
        for argument, value in _zip(schema, args, kwargs):
            if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
                continue
            try:
                span = _span(value)
            except RuntimeError:
                continue
            if span is None:
                continue
            # (by the bytes the host op touches: two halves of one pinned staging buffer are two buffers)
            flight = next((f for (allocation, start, end), f in in_flight.items()
                           if allocation == span[0] and start < span[2] and span[1] < end), None)
            if flight is None:
                continue
            writes = argument.alias_info is not None and argument.alias_info.is_write
            if flight.kind == "source" and not writes:
                continue  # (reading the source of a host-to-device copy is fine)
            action = "writes" if writes else "reads"
            copy = ("device-to-host copy into it" if flight.kind == "destination" else
                    "host-to-device copy from it")
            self.report(
                f"torch-fl stream sanitizer: the host {action} a tensor while a non_blocking=True {copy} may "
                f"still be running\n"
                f"  host:   {func._schema.name} {action} argument {argument.name!r}\n"
                f"        at {_user_frame(traceback.extract_stack(limit=40))}\n"
                f"  copy:   aten::{flight.op} (non_blocking=True) on {stream_name(flight.key)}\n"
                f"        at {_user_frame(flight.stack)}\n"
                f"  On the chip the host {'sees garbage' if flight.kind == 'destination' else 'changes the data the copy sends'}"
                f" until the copy finishes.\n"
                f"  Fix: synchronize before touching it on the host (synchronize() of {stream_name(flight.key)}, "
                f"an event recorded after the copy and event.synchronize(), or the device's synchronize()).")
            return


class _Collective:
    """What names a collective in a report (where a kernel has its schema)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _freed(owner: Any, allocation: int, key: Any, _storage: Any) -> None:
    sanitizer = owner()
    if sanitizer is not None:
        sanitizer.watched.pop(allocation, None)
        if sanitizer.active:
            sanitizer.freed(allocation, key)


def _allocation(tensor: Any) -> int:
    """Where the memory of an emulated tensor's allocation starts (its storage's pointer)."""
    try:
        return tensor._data.untyped_storage().data_ptr() or id(tensor)
    except RuntimeError:
        return tensor._data.data_ptr() or id(tensor)


def _zip(schema: Any, args: tuple, kwargs: dict) -> Any:
    yield from zip(schema.arguments[: len(args)], args, strict=False)
    named = {a.name: a for a in schema.arguments[len(args):]}
    for name, value in kwargs.items():
        if name in named:
            yield named[name], value


def _tensors(value: Any, nested: bool = False) -> list[Any]:
    device = state.tensor_type
    if type(value) is device:
        return [value]
    if isinstance(value, (list, tuple)):
        if nested:
            return [t for v in value for t in _tensors(v, True)]
        return [v for v in value if type(v) is device]
    return []


def _device_index(args: tuple, kwargs: dict) -> int | None:
    device = state.tensor_type
    for value in (*args, *kwargs.values()):
        if type(value) is device:
            return value._index
        if isinstance(value, (list, tuple)):
            for item in value:
                if type(item) is device:
                    return item._index
    where = kwargs.get("device")
    if isinstance(where, torch.device) and where.type == backend_name():
        return state.current if where.index is None else where.index
    return None


def _blocking_transfer(func: Any, args: tuple, kwargs: dict) -> bool:
    """A copy between the host and the device that is not non_blocking (or .item())."""
    if func is aten._local_scalar_dense.default:
        return True
    if func is aten.copy_.default:
        if (len(args) > 2 and args[2]) or kwargs.get("non_blocking"):
            return False
        kinds = {type(args[0]) is state.tensor_type, type(args[1]) is state.tensor_type}
        return len(kinds) == 2 and args[1].dim() > 0
    if func is aten._to_copy.default:
        target = kwargs.get("device")
        return target is not None and not kwargs.get("non_blocking") and \
            (target.type == backend_name()) != (type(args[0]) is state.tensor_type)
    return False


class _Mode(TorchDispatchMode):
    def __init__(self, sanitizer: Sanitizer) -> None:
        super().__init__()
        self.sanitizer = sanitizer

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # (TorchDispatchMode wraps __torch_dispatch__ in torch._disable_dynamo, a Python wrapper with its own
        # checks at every op: `__torch_dispatch__` below turns Dynamo off for the call itself, one C call each way)
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        prior = _set_eval_frame(None)  # (Dynamo never traces the check, as torch._disable_dynamo ensures)
        try:
            return self._dispatch(func, args, kwargs or {})
        finally:
            _set_eval_frame(prior)

    __torch_dispatch__._torchdynamo_disable = True  # type: ignore[attr-defined]

    def _dispatch(self, func: Any, args: tuple, kwargs: dict) -> Any:
        sanitizer = self.sanitizer
        if sanitizer.deferred:
            sanitizer.raise_deferred()
        op = _ops.get(id(func))
        if op is None:
            if func is aten.record_stream.default:  # (streams.py's handler tells the sanitizer)
                return func(*args, **kwargs)
            op = _ops[id(func)] = _Op(func)
        first = args[0] if args else None
        index = first._index if type(first) is state.tensor_type else _device_index(args, kwargs)
        if index is None:
            if streams.timeline.in_flight:
                sanitizer.check_host(func, args, kwargs)
            return func(*args, **kwargs)
        if op.sync is not None:
            sanitizer.note_host_sync(op.sync)
        accesses = _Accesses()
        accesses.read_arguments(op, args, kwargs)
        outputs = func(*args, **kwargs)
        accesses.read_outputs(op, outputs)
        sanitizer.launch(op.schema, index, accesses, accesses.fresh, op.views)
        if op.transfer and _blocking_transfer(func, args, kwargs):
            # a blocking copy between host and device ends with a synchronisation of its stream, as
            # PyTorch's CUDA copy does (cudaStreamSynchronize, which CSAN's trace sees): after the copy
            streams.timeline.sync_stream(streams.current_stream(index)._key)
        return outputs


_active: Sanitizer | None = None


def enable(raise_errors: bool = True) -> Sanitizer:
    """Start checking (on this thread's ops, as CSAN does); one sanitizer per process."""
    global _active
    if _active is not None:
        _active.raise_errors = raise_errors
        return _active
    sanitizer = Sanitizer(raise_errors)
    sanitizer.mode.__enter__()
    sanitizer.active = True
    streams.timeline.listener = sanitizer
    _active = sanitizer
    return sanitizer


def disable() -> None:
    """Stop checking (the reports found stay on the object enable() returned)."""
    global _active
    sanitizer, _active = _active, None
    if sanitizer is None:
        return
    sanitizer.active = False
    streams.timeline.listener = None
    streams.timeline.in_flight.clear()
    sanitizer.mode.__exit__(None, None, None)


def active() -> Sanitizer | None:
    return _active


def checking() -> Sanitizer | None:
    """The sanitizer, if it checks the ops of this thread (the one that enabled it, and the autograd threads
    that run its backward: PyTorch hands them its dispatch modes); else None."""
    sanitizer = _active
    if sanitizer is None or sanitizer.mode not in _get_current_dispatch_mode_stack():
        return None
    return sanitizer
