"""Record the aten operators a model calls, with their dtypes and the modules that call them, without
computing anything.

The model runs on fake tensors (``FakeTensorMode``): shapes, dtypes and strides propagate, no data is
allocated or computed, and a dispatch mode above the fake mode counts every call below autograd, where
a backend sees it (CompositeImplicitAutograd ops appear as their sub-ops). The model is not copied: its
parameters and buffers are swapped for fake stand-ins for the duration (``placement.borrowed``).

Where the fake tensors live decides which kernels C++ code picks by device type. ``trace()`` uses fake
*CPU* tensors: the recorded op set is exactly what a real CPU run dispatches. ``trace_step()``, which
coverage uses, puts the model's tensors on a device apart from the host (``meta``, or the emulated
backend ``emu`` so that PyTorch makes that backend's choices), counts only the calls on them (host work
such as an optimizer's CPU step counter is not the chip's), routes each call as the router would
(chains.py), steers attention and dropout to the device's kernels (fidelity.py), and, when fake tensors
meet a branch on values, records a real run instead.

Each call is attributed to the innermost module running it: forward pre/post hooks keep a module stack.
Backward calls are attributed through autograd's sequence numbers: every node created in the forward
pass gets the next number of a thread-local counter, the hooks note where the counter stood whenever the
innermost module changed, and during backward ``torch._C._current_autograd_node()`` names the node that
is running. That was chosen over full backward hooks, which wrap each module's inputs and outputs in an
extra autograd Function: in-place ops on those outputs (``nn.ReLU(inplace=True)`` after a convolution)
then fail, and the wrapping adds view ops that the model does not call. Gradient accumulation into a
parameter goes to the parameter's module, optimizer calls to ``<optimizer>``, and everything else (the
loss, the top-level module's own code) to ``<model>``.
"""

from __future__ import annotations

import bisect
import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .._mode_exit import entered
from .._names import RouteKind
from .._opnames import canonical_op_name
from ..errors import TraceError
from ..routing.emu.slot import backend_name
from ..routing.router import first_dtype
from . import placement
from .chains import CallKey, Replay
from .model import ModelSpec

if TYPE_CHECKING:
    from ..report import Stage
    from ..routing.table import RouteTable
    from .fidelity import DeviceKernels

MODEL = "<model>"
OPTIMIZER = "<optimizer>"

# Dispatched only because fake tensors answer metadata queries in Python (a real tensor answers
# them in C++ without a dispatch), or instrumentation that runs no kernel on any device.
_BOOKKEEPING_NAMESPACES = frozenset({"profiler"})
_BOOKKEEPING_OPS = frozenset({"prim::device.default", "prim::layout.default", "aten::sym_size.int",
                              "aten::sym_stride.int", "aten::sym_numel.default",
                              "aten::sym_storage_offset.default"})


@dataclass
class OpRecord:
    """Calls of one (op, dtype) in a trace, and which modules issued them."""

    op: str                  # canonical 'aten::name.overload'
    dtype: str | None        # the dtype that decides the route (torch_fl.routing.router.first_dtype)
    calls: int = 0
    modules: dict[str, int] = field(default_factory=dict)  # qualified module name -> calls, most first
    # With a route table (coverage): the translated ops this call was reached through, outermost
    # first (() for a call the model makes itself), and the route the router would take.
    via: tuple[tuple[str, str | None], ...] = ()  # (op, dtype) of each translated call
    route: RouteKind | None = None
    source: str = ""
    copied_bytes: int = 0    # route fallback: bytes its calls copy host<->device, from the traced shapes


@dataclass
class TraceResult:
    """A trace and how it was obtained."""

    records: list[OpRecord]
    real_run: str = ""  # why the step was recorded from a real CPU run instead of fake tensors ("": it was not)


def make_optimizer(params: Any) -> torch.optim.Optimizer:
    """The optimizer of a traced training step.

    AdamW with ``foreach=False``: the per-parameter ops of a plain step, which every backend runs,
    rather than the ``_foreach_*`` ops that a device may or may not fuse."""
    return torch.optim.AdamW(params, foreach=False)


class _Attribution:
    """Which module issued the op being dispatched now (hooks on the traced copy of the model)."""

    def __init__(self, model: torch.nn.Module):
        self.stack = [MODEL]
        # Autograd sequence numbers at which the innermost module changed, and that module.
        self.starts: list[int] = [torch._C._autograd._get_sequence_nr()]
        self.names: list[str] = [MODEL]
        self.param_owner: dict[int, str] = {}
        self.handles: list[Any] = []
        self._by_seq: dict[int, str] = {}
        self._module_names: dict[int, str] = {}
        for name, module in model.named_modules():
            self._module_names[id(module)] = name or MODEL
            for param in module.parameters(recurse=False):
                self.param_owner.setdefault(id(param), name or MODEL)
            if name:  # the top-level module's own code counts as <model>
                self.handles.append(module.register_forward_pre_hook(self._pre_hook(name)))
                self.handles.append(module.register_forward_hook(self._post_hook, always_call=True))

    def _pre_hook(self, name: str):
        def hook(module: torch.nn.Module, args: Any) -> None:
            self.enter(name)
        return hook

    def _post_hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self.exit()

    def enter(self, name: str) -> None:
        self.stack.append(name)
        self._mark()

    def exit(self) -> None:
        self.stack.pop()
        self._mark()

    def _mark(self) -> None:
        seq = torch._C._autograd._get_sequence_nr()  # the number the next autograd node gets
        if self.starts[-1] == seq:
            self.names[-1] = self.stack[-1]
        else:
            self.starts.append(seq)
            self.names.append(self.stack[-1])

    def module(self) -> str:
        node = torch._C._current_autograd_node()
        return self.stack[-1] if node is None else self._backward_owner(node)

    def _backward_owner(self, node: Any) -> str:
        variable = getattr(node, "variable", None)  # AccumulateGrad: the parameter it accumulates into
        if isinstance(variable, torch.Tensor):
            return self.param_owner.get(id(variable), MODEL)
        seq = node._sequence_nr()
        owner = self._by_seq.get(seq)
        if owner is None:
            owner = self._by_seq[seq] = self.names[max(bisect.bisect_right(self.starts, seq) - 1, 0)]
        return owner

    def failed_in(self, exc: BaseException) -> str:
        """The innermost module whose forward is on the traceback of `exc` (the hooks have unwound)."""
        where = self.stack[-1]
        tb = exc.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code.co_name == "forward":
                where = self._module_names.get(id(frame.f_locals.get("self")), where)
            tb = tb.tb_next
        return where

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class _Recorder(TorchDispatchMode):
    """Counts (op, dtype, module) of every device call that reaches the dispatcher's Python key; with
    a Replay, routes each call as the router would and expands translations (chains.py)."""

    def __init__(self, attribution: _Attribution, replay: Replay | None = None,
                 side: placement.DeviceSide | None = None, stage: Stage | None = None):
        super().__init__()
        self.attribution = attribution
        self.stage = stage  # counts the recorded calls for the progress line (None: nobody watches)
        self.replay = replay
        self.side = side or placement.DeviceSide("all")
        self.calls: Counter[CallKey] = Counter() if replay is None else replay.calls
        self._names: dict[Any, str | None] = {}  # None: bookkeeping, not recorded

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = self._names.get(func, "")
        if op == "":
            op = self._names[func] = None if _is_bookkeeping(func) else canonical_op_name(func)
        if op is None:
            return func(*args, **kwargs)
        module = self.attribution.module()
        if not self.side.has(args, kwargs, module == OPTIMIZER):
            return func(*args, **kwargs)  # host work
        dtype = first_dtype(args, kwargs)
        if self.stage is not None:
            self.stage.done += 1
        if self.replay is not None:
            out = self.replay.call(self, func, op, dtype, module, args, kwargs)
        else:
            self.calls[op, dtype, module, (), None, ""] += 1
            out = func(*args, **kwargs)
        self.side.mark(out)
        return out


def _is_bookkeeping(func: Any) -> bool:
    return func.namespace in _BOOKKEEPING_NAMESPACES or canonical_op_name(func) in _BOOKKEEPING_OPS


@contextlib.contextmanager
def _phase(what: str, attribution: _Attribution) -> Iterator[None]:
    """Turn a failure into a TraceError that names the step and the module that was running."""
    try:
        yield
    except TraceError:
        raise
    except Exception as exc:
        where = attribution.failed_in(exc)
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise TraceError(f"tracing the {what} failed in module '{where}': {type(exc).__name__}: "
                         f"{first_line}{_hint(exc)}") from exc


def _data_dependent(exc: BaseException | None) -> bool:
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    return isinstance(exc, (GuardOnDataDependentSymNode, DataDependentOutputException,
                            DynamicOutputShapeException))


def _hint(exc: Exception) -> str:
    if _data_dependent(exc):
        return (". Fake tensors hold no values, so Python code that branches on a tensor's values (or on "
                "a size that depends on them) cannot be followed; trace(..., real_fallback=True) (what "
                "`torchfl coverage` does) records a real CPU run of the example inputs instead.")
    return ""


def trace(spec: ModelSpec, *, train: bool = False, step: bool = True, amp: bool = False,
          amp_dtype: str | torch.dtype = torch.bfloat16, math_attention: bool = False) -> list[OpRecord]:
    """The (op, dtype) calls of one forward pass of `spec` (with `train`: the loss, the backward pass
    and one optimizer step, see :func:`make_optimizer`), computed on fake CPU tensors.

    Args:
        spec: the model, example inputs and loss (``torch_fl.analysis.model.load_model``).
        train: trace a training step (the model in train mode) instead of an inference forward pass
            (eval mode, no grad).
        step: with `train`, end with the optimizer step (False: forward and backward only).
        amp: run the forward pass and the loss under ``torch.autocast("cpu", dtype=amp_dtype)``.
        math_attention: make SDPA take its math path (a device without fused attention).

    Returns:
        One record per (op, dtype), sorted by op then dtype.

    Example:
        >>> from torch_fl.analysis.model import load_model
        >>> records = trace(load_model("examples/gpt.py:factory"), train=True)  # doctest: +SKIP
        >>> next(r for r in records if r.op == "aten::gelu_backward.default")  # doctest: +SKIP
        OpRecord(op='aten::gelu_backward.default', dtype='float32', calls=2,
                 modules={'blocks.0.mlp.1': 1, 'blocks.1.mlp.1': 1}, via=(), route=None, source='')
    """
    kernels = None
    if math_attention:
        from .fidelity import DeviceKernels

        kernels = DeviceKernels("CPU", host=False, attention=(), math_attention=True)
    return trace_step(spec, train=train, step=step, amp=amp, amp_dtype=amp_dtype, kernels=kernels,
                      cpu_kernels=True).records


def trace_step(spec: ModelSpec, *, train: bool = False, step: bool = True, amp: bool = False,
               amp_dtype: str | torch.dtype = torch.bfloat16, table: RouteTable | None = None,
               kernels: DeviceKernels | None = None, device: str = "cpu", cpu_kernels: bool = False,
               real_fallback: bool = False, stage: Stage | None = None) -> TraceResult:
    """:func:`trace`, with the router's decisions and the device's kernel choices.

    Args:
        table: route every call as the router of this table would, expanding translations into the
            calls they make (chains.py); records then carry ``via``, ``route`` and ``source``.
        kernels: the device's kernel choices (fidelity.device_kernels), made on the trace's tensors
            where PyTorch would make the CPU's; None: the CPU's.
        device: where the model's tensors live in the trace: ``cpu`` (the host: every call counts),
            ``meta`` (a device apart from the host: only calls on meta tensors count, host work such as
            an optimizer's step counter does not), or an emulated device such as ``emu:0`` (fake tensors
            of that backend: PyTorch makes the emulated backend's own kernel choices).
        cpu_kernels: keep the CPU's oneDNN kernels even though `kernels` is not the host
            (trace(math_attention=True) only changes attention).
        real_fallback: when fake tensors meet Python code that branches on tensor values
            (PyTorch's own ``_detect_is_causal_mask`` does), record a real run of the example inputs
            (on the emulated device, else on the CPU) instead of failing; ``TraceResult.real_run`` then
            says why.
        stage: the progress stage (torch_fl.report.stage) whose count is the calls recorded so far.
    """
    if isinstance(amp_dtype, str):
        amp_dtype = getattr(torch, amp_dtype)
    options = dict(train=train, step=step, amp=amp, amp_dtype=amp_dtype, table=table, kernels=kernels,
                   device=device, cpu_kernels=cpu_kernels, stage=stage)
    try:
        return TraceResult(_trace(spec, fake=True, **options))
    except TraceError as exc:
        if not real_fallback or not _data_dependent(exc.__cause__):
            raise
        reason = str(exc).split(". Fake tensors hold no values")[0]
    if any(t.device.type == "meta" for t in (*spec.model.parameters(), *spec.model.buffers())):
        raise TraceError(f"{reason}. A real run of the example inputs would follow that branch, but the "
                         f"model is on the meta device (no values): build it on the CPU to check it.")
    from ..routing import suspended

    # Plain PyTorch underneath (an active emulation must not check this run a second time), and
    # dropout and friends leave the caller's RNG untouched.
    if stage is not None:
        stage.done = 0  # the real run records the step again
    with suspended(), torch.random.fork_rng(devices=[]):
        records = _trace(spec, fake=False, **options)
    return TraceResult(records, real_run=reason)


def _trace(spec: ModelSpec, *, fake: bool, train: bool, step: bool, amp: bool, amp_dtype: torch.dtype,
           table: RouteTable | None, kernels: DeviceKernels | None, device: str,
           cpu_kernels: bool, stage: Stage | None) -> list[OpRecord]:
    # A device apart from the host: its work is told apart from host work (placement.DeviceSide).
    apart = device != "cpu" or (kernels is not None and not kernels.host and not cpu_kernels)
    if not fake and device == "meta":
        device = "cpu"  # a real run of a non-emulated device computes on the CPU
    backend = torch.device(device).type
    # For an emulated chip on the emulated backend PyTorch makes the chip's kernel choices itself;
    # elsewhere (a real device's trace, whichever tensors it uses) they are steered (fidelity.py).
    steer = kernels is not None and not (backend == backend_name() and kernels.emulated)
    # ... except SDPA's, which the emulated device makes in Python (routing/emu/attention.py): steered alone
    attention_only = kernels is not None and not steer and bool(kernels.attention)
    if fake:
        mode = placement.fake_mode()
        tensors = placement.stand_ins(spec.model, lambda t: placement.to_fake(mode, t, device))
        inputs = placement.fake_inputs(spec.inputs, mode, device)
    else:
        mode = contextlib.nullcontext()
        tensors = placement.stand_ins(spec.model, lambda t: t.detach().clone().to(device))
        inputs = placement.moved(spec.inputs, device)
    if backend != "cpu":
        side = placement.DeviceSide(backend)
    elif apart:
        seeds = [*tensors.values(), *(t for t in placement.leaves(inputs) if isinstance(t, torch.Tensor))]
        side = placement.DeviceSide("tracked", seeds)
    else:
        side = placement.DeviceSide("all")
    with placement.borrowed(spec.model, tensors, train) as model:
        return _run(spec, model, inputs, mode, side, train=train, step=step, amp=amp, amp_dtype=amp_dtype,
                    table=table, kernels=kernels if steer or attention_only else None, cpu_kernels=cpu_kernels,
                    backend=backend, attention_only=attention_only, stage=stage)


def _run(spec: ModelSpec, model: torch.nn.Module, inputs: tuple, mode: Any, side: placement.DeviceSide, *,
         train: bool, step: bool, amp: bool, amp_dtype: torch.dtype, table: RouteTable | None,
         kernels: DeviceKernels | None, cpu_kernels: bool, backend: str,
         attention_only: bool = False, stage: Stage | None = None) -> list[OpRecord]:
    attribution = _Attribution(model)
    recorder = _Recorder(attribution, Replay(table) if table is not None else None, side, stage)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(mode)
            if not isinstance(mode, contextlib.nullcontext):
                stack.enter_context(_chip_shapes(mode))
                if backend == backend_name():
                    stack.enter_context(entered(_HostData, backend))
            if kernels is not None:
                from .fidelity import kernel_choices

                stack.enter_context(kernel_choices(kernels, cpu_kernels=cpu_kernels, attention_only=attention_only))
            optimizer = make_optimizer(model.parameters()) if train and step else None
            stack.enter_context(recorder)
            with _phase("forward pass", attribution), torch.set_grad_enabled(train), \
                    torch.autocast(_autocast_type(backend), dtype=amp_dtype, enabled=amp):
                output = model(*inputs)
                loss = spec.loss(output, inputs) if train else None
            if loss is not None:
                with _phase("backward pass", attribution):
                    loss.backward()
            if optimizer is not None:
                attribution.enter(OPTIMIZER)
                with _phase("optimizer step", attribution):
                    optimizer.step()
                attribution.exit()
    finally:
        attribution.remove()
    return _records(recorder.calls, recorder.replay.copied if recorder.replay is not None else None)


class _HostData(TorchFunctionMode):
    """Tensors made from Python data (``torch.tensor``) while tracing an emulated chip on fake tensors
    are made on the host for real, then moved where the code asked: what the emulator does with them.
    Left to the fake mode, ``torch.tensor(data, device=<emulated>)`` (HF's DynamicCache in every forward
    with use_cache, diffusers' Python-number timesteps) reaches the emulated backend directly, where its
    Python backend cannot serve the copy (an internal assert, ``func != nullptr``); and a host tensor made
    under the fake mode is a fake constant, which PyTorch moves to the device for real (HF's sliding-window
    cache), onto a backend that holds no fake storage. A real host tensor becomes a fake device tensor
    when moved under the fake mode.

    Indexing with Python sequences (``x[..., [-1], :]``, Falcon's last-token slice; ``x[[0, 2]] = v``)
    is the same case: PyTorch's C++ indexing turns the list into an index tensor made on the device with
    the Python key excluded, which the emulated backend cannot serve either. Such an index is made on the
    host here (Long, or Bool for a mask, as PyTorch's indexing makes it) and moved to the device, and the
    indexing op then sees a device index tensor, as the emulated device runs it."""

    # PyTorch's own functions, which the C++ torch-function call hands in: an emulated chip wraps torch.tensor
    # for pin_memory=True (routing/emu/streams.py), and the wrapper calls the function it wraps.
    _FACTORIES = frozenset(getattr(f, "__wrapped__", f) for f in (torch.tensor, torch.as_tensor, torch.asarray))
    _INDEXING = frozenset({torch.Tensor.__getitem__, torch.Tensor.__setitem__})

    def __init__(self, backend: str) -> None:
        super().__init__()
        self.backend = backend

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in self._FACTORIES and not (args and isinstance(args[0], torch.Tensor)):
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            target = kwargs.get("device")
            with unset_fake_temporarily():
                host = func(*args, **{**kwargs, "device": "cpu"})
            if target is None or torch.device(target).type == "cpu":
                return host
            return host.to(target).requires_grad_(host.requires_grad)
        if func in self._INDEXING and len(args) >= 2 and isinstance(args[0], torch.Tensor) \
                and args[0].device.type == self.backend:
            index = _index_tensors(args[1], args[0].device)
            if index is not args[1]:
                args = (args[0], index, *args[2:])
        return func(*args, **kwargs)


def _index_tensors(index: Any, device: torch.device) -> Any:
    """`index` with every Python sequence PyTorch's indexing turns into an index tensor replaced by
    that tensor on `device` (python_variable_indexing.cpp: a list is one index unless it holds a
    tensor, a sequence, a slice, Ellipsis or None and is shorter than 32; then it is a tuple of them)."""
    if isinstance(index, list) and _sequence_as_tuple(index):
        index = tuple(index)
    if isinstance(index, tuple):
        parts = tuple(_index_tensors(part, device) if isinstance(part, (list, tuple)) and part is not index
                      else part for part in index)
        return index if all(a is b for a, b in zip(parts, index, strict=True)) else parts
    if not isinstance(index, (list, tuple)):
        return index
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        host = torch.tensor(index)
    if host.dtype != torch.bool:
        host = host.long()
    return host.to(device)


def _sequence_as_tuple(index: list) -> bool:
    return len(index) < 32 and any(isinstance(part, (torch.Tensor, list, tuple, slice)) or part is Ellipsis
                                   or part is None for part in index)


# The dtypes PyTorch's own _grouped_mm kernels take (CUDA's bf16 fast path and its fallback for the rest,
# the CPU's since 2.9): the meta kernel still checks for bf16 alone, the one dtype of the first CUDA kernel.
_GROUPED_MM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@contextlib.contextmanager
def _chip_shapes(mode: Any) -> Iterator[None]:
    """Shape rules for the trace's fake mode where PyTorch's meta kernel refuses what the kernels run.

    ``_grouped_mm`` on float32 or float16 (HF's MoE experts, Mixtral and the others, on every device
    that is not the CPU or MPS: ``transformers.integrations.moe``): the chip computes it, the emulated
    device computes it, and the meta kernel stops with "Expected inputs of BF16 type". Here the call
    gets its output shape and the dtype the chip's kernel gives (``out_dtype`` or ``mat_a``'s), and the
    route is the one of that dtype. bfloat16 calls keep the meta kernel and its checks."""
    from torch._subclasses import fake_impls

    aten = torch.ops.aten
    grouped = (aten._grouped_mm.default,) if hasattr(aten, "_grouped_mm") else ()

    def grouped_mm(fake_mode: Any, func: Any, mat_a: torch.Tensor, mat_b: torch.Tensor,
                   offs: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                   out_dtype: torch.dtype | None = None) -> Any:
        if fake_mode is not mode or (mat_a.dtype == mat_b.dtype == torch.bfloat16
                                     and out_dtype in (None, torch.bfloat16)):
            return NotImplemented
        from torch._meta_registrations import _create_grouped_mm_output_tensor

        torch._check(mat_a.dtype == mat_b.dtype and mat_a.dtype in _GROUPED_MM_DTYPES,
                     lambda: f"_grouped_mm: mat_a and mat_b must be of one of {_GROUPED_MM_DTYPES}, got "
                             f"{mat_a.dtype} and {mat_b.dtype}")
        torch._check(out_dtype in (None, mat_a.dtype), lambda: "_grouped_mm: out_dtype must be mat_a's dtype")
        torch._check(bias is None, lambda: "_grouped_mm: bias is not supported")
        torch._check(offs is not None or (mat_a.dim() == 3 and mat_b.dim() == 3),
                     lambda: "_grouped_mm: a 2D operand needs offs")
        with fake_mode:
            return _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)

    entry = (lambda func: func in grouped, grouped_mm)
    fake_impls.op_implementations_checks.insert(0, entry)
    try:
        yield
    finally:
        fake_impls.op_implementations_checks.remove(entry)


def _autocast_type(backend: str) -> str:
    """The autocast device type of the trace's device tensors (meta has none: nothing to cast)."""
    return "cpu" if backend == "meta" else backend


def _records(calls: Counter[CallKey], copied: Counter[CallKey] | None = None) -> list[OpRecord]:
    records: dict[tuple[str, str | None, tuple[tuple[str, str | None], ...], RouteKind | None], OpRecord] = {}
    for key, count in calls.items():
        op, dtype, module, via, route, source = key
        record = records.get((op, dtype, via, route))
        if record is None:
            record = records[op, dtype, via, route] = OpRecord(op, dtype, via=via, route=route,
                                                               source=source)
        record.calls += count
        record.copied_bytes += copied.get(key, 0) if copied else 0
        record.modules[module] = record.modules.get(module, 0) + count
    for record in records.values():
        record.modules = dict(sorted(record.modules.items(), key=lambda kv: (-kv[1], kv[0])))
    return sorted(records.values(), key=lambda r: (r.op, r.dtype or "", [(o, d or "") for o, d in r.via],
                                                   r.route or ""))


__all__ = ["MODEL", "OPTIMIZER", "OpRecord", "TraceError", "TraceResult", "make_optimizer", "trace",
           "trace_step"]
