#!/usr/bin/env python
"""Check torch-fl's `translate` and `fallback` routes against PyTorch's OpInfo database.

For every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` that supports float32
on the CPU, the first ``--samples`` float32 samples are run three ways per variant (the function, its
in-place variant, its ``out=`` form):

1. on the plain CPU: the reference; a second run under a recording dispatch mode lists the aten
   overloads the sample reaches below autograd (what a device's dispatch key, or an emulated chip,
   sees) and must reproduce the reference (else the output is not comparable);
2. on an emulated chip whose native set is every CPU kernel, with the recorded overloads that have a
   PyTorch decomposition (``torch_fl.routing.translate.translation(op) is not None``) forced to the
   route under test through ``FL_ROUTE``: the output, the inputs afterwards (in-place and ``out=``
   writes) and which outputs alias which inputs (views) must match the reference;
3. for ``fallback`` also ``torch_fl.routing.router.cpu_fallback(ovl, args, kwargs, force_copy=True)``
   on each recorded call of those overloads, the copy-to-host-and-back path of a real device: results,
   written arguments (in-place, ``out=``) and aliasing (views, in-place returns) per the op's schema.
   ``--fallback-all`` forces every aten overload reached, decomposable or not.

Tolerances are OpInfo's: ``torch.testing.assert_close``'s float32 defaults (rtol 1.3e-6, atol 1e-5),
loosened by the OpInfo's own float32 CPU ``toleranceOverride``/``precisionOverride`` decorators and,
in translate mode, by PyTorch's test_decomp tolerance table for the decompositions it names. NaNs
compare equal. Every run uses the same seed, so random ops compare too; samples whose reference
raises, samples of random ops whose decomposition draws its numbers differently, samples with sparse
inputs, and OpInfos flagged ``has_nondeterministic_output`` are skipped and counted with the reason.

Usage:
    opinfo_routes.py [--ops NAME,...] [--mode translate|fallback|both|device] [--samples N] [--limit N]
                     [--variants function,inplace,out] [--fallback-all] [--device-chip NAME]
                     [--json FILE] [--quiet]

Exit status: 0 when every failure is a documented known failure (KNOWN_FAILURES; docs/opinfo.md),
1 otherwise. Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import torch_fl
from torch_fl.description.probe import canonical_op_name
from torch_fl.routing import emu, suspended
from torch_fl.routing.router import cpu_fallback
from torch_fl.routing.translate import translation

MODES = ("translate", "fallback")
# `device` mode: each sample moved to an emulated chip (emu:cuda by default), with no route forced; the
# chip's own routes decide (native ops run the CPU kernel on the device tensor's data).
ALL_MODES = (*MODES, "device")
DEVICE_CHIP = "cuda"
VARIANTS = ("function", "inplace", "out")
SEED = 1234
DEFAULT_RTOL, DEFAULT_ATOL = 1.3e-6, 1e-5  # assert_close's float32 defaults
# Recorded calls per overload and sample handed to cpu_fallback directly: the first calls already
# cover the argument shapes of a sample, and each costs a full copy of the arguments.
CALLS_PER_OVERLOAD = 2

# The emulated chip: every CPU kernel is native, so only the routes forced through FL_ROUTE differ
# from the reference. A translation that cannot run (NotImplemented, self-recursion) raises instead
# of silently falling back, so the report shows it.
CHIP_TOML = """\
schema = 1
name = "opinfo-chip"
vendor = "torch-fl scripts/opinfo_routes.py"
summary = "Emulated chip: every CPU kernel native; the op under test is forced by FL_ROUTE"
device_type = "cpu"
dispatch_key = "CPU"

[detect]
priority = -1

[ops]
native = "probe"
default = "translate-or-error"
"""

# PyTorch's own tolerances for decompositions that are known not to match the eager kernel bit for
# bit in float32 (test/test_decomp.py, op_assert_equal_tol_table): overload -> (rtol, atol).
DECOMP_TOLERANCES: dict[str, tuple[float, float]] = {
    "aten::native_layer_norm.default": (1e-3, 1e-3),
    "aten::native_layer_norm_backward.default": (1e-3, 1e-3),
    "aten::native_group_norm.default": (1e-4, 5e-6),
    "aten::grid_sampler_2d.default": (7e-6, 3e-5),
    "aten::mv.default": (1e-5, 3e-5),
}

# Overloads whose output is uninitialised memory: only their metadata is comparable.
UNINITIALIZED = frozenset({"aten::empty", "aten::empty_like", "aten::new_empty", "aten::empty_strided",
                           "aten::new_empty_strided", "aten::empty_permuted"})
# Overloads with some outputs left partly uninitialised (indices into the flattened outputs): the
# CPU kernel of _ctc_loss fills log_alpha only up to each sequence's input length.
PARTLY_UNINITIALIZED: dict[str, tuple[int, ...]] = {"aten::_ctc_loss": (1,)}



@dataclass(frozen=True)
class Known:
    """A documented failure: every failing sample's reason contains `match`; `why` explains it."""

    match: str
    why: str


# (mode, OpInfo name) -> the documented failure; docs/opinfo.md explains each. A failure whose reason
# does not contain `match` still counts as a new failure. A "torch-fl:" entry would be a bug in
# torch-fl's routing, removed once fixed (tests/routing/test_opinfo.py checks listed failures still fail).
_ADAPTIVE_MAX_POOL = Known(
    "its decomposition does not cover these inputs",
    "PyTorch: the adaptive_max_pool decomposition returns NotImplemented unless each input size is a "
    "multiple of the output size; with ops.default = 'translate-or-error' the router then raises "
    "UnsupportedOperatorError ('translate-or-fallback' would run the CPU kernel)")
KNOWN_FAILURES: dict[tuple[str, str], Known] = {
    ("translate", "addbmm"): Known(
        "doesn't match the broadcast shape",
        "PyTorch: the CPU kernel of addbmm_ resizes a broadcastable self (shape [1] or []) to the "
        "result's shape, where in-place ops raise; the decomposition (addbmm, then self.copy_) raises "
        "the usual broadcast error"),
    ("translate", "nn.functional.adaptive_max_pool1d"): _ADAPTIVE_MAX_POOL,
    ("translate", "nn.functional.adaptive_max_pool2d"): _ADAPTIVE_MAX_POOL,
    ("translate", "nn.functional.adaptive_max_pool3d"): _ADAPTIVE_MAX_POOL,
    # device mode (emu:cuda): what a CUDA device does differently from the CPU reference, and what moving a
    # CPU sample with .to(device) changes
    ("device", "histogram"): Known(
        "is not supported on emu:cuda",
        "PyTorch: histogram has no CUDA kernel (torch.histogram is CPU-only); the emulated CUDA says so as "
        "a real one does"),
    ("device", "histogramdd"): Known(
        "is not supported on emu:cuda",
        "PyTorch: histogramdd has no CUDA kernel (CPU-only), as for histogram"),
    ("device", "hash_tensor"): Known(
        "it produces uint64, which is not in precision.dtypes",
        "torch-fl: hash_tensor returns uint64, and cuda.toml's precision.dtypes has no uint64 (CUDA runs "
        "only a few ops in the unsigned 64-bit type; the description leaves it out)"),
    ("device", "tensor_split"): Known(
        "expected tensor_indices_or_sections to be on cpu",
        "harness: the sample's indices tensor must stay on the CPU (tensor_split requires it on every "
        "device); moving every sample tensor to the device moves it too"),
    ("device", "as_strided.partial_views"): Known(
        "",
        "harness: the sample is a view whose as_strided reaches storage outside the view; .to(device) "
        "copies the view alone (as on any accelerator), so that storage is not there"),
    ("device", "ravel"): Known(
        "aliases an input",
        "harness: .to(device) makes the non-contiguous sample contiguous, and ravel of a contiguous "
        "tensor is a view; on the CPU the sample stays non-contiguous and ravel copies"),
    ("device", "to_sparse"): Known(
        "SparseTensorImpl",
        "torch-fl: the emulated device holds strided tensors only; sparse layouts are not emulated"),
    ("device", "nn.functional.dropout3d"): Known(
        "elements differ",
        "PyTorch: on a non-CPU device feature dropout draws its mask through another op sequence, so the "
        "same seed gives another mask (a random op: only its structure is comparable)"),
    ("translate", "take"): Known(
        "aliases an input",
        "PyTorch: the take decomposition, self.reshape(-1)[index], returns a view of self when index "
        "is a 0-d tensor (basic indexing); aten::take returns a new tensor, so writes to the result "
        "reach the input"),
}


# Results ------------------------------------------------------------------------------------------
@dataclass
class SampleResult:
    variant: str
    index: int
    mode: str
    status: str  # pass | fail | skip
    reason: str = ""


@dataclass
class OpResult:
    name: str
    overloads: list[str] = field(default_factory=list)  # every overload the samples reached
    decomposed: list[str] = field(default_factory=list)  # the aten ones with a decomposition
    forced: dict[str, list[str]] = field(default_factory=dict)  # mode -> overloads forced to it
    samples: list[SampleResult] = field(default_factory=list)
    skipped: str = ""  # why the OpInfo was not examined at all
    seconds: float = 0.0

    @property
    def examined(self) -> bool:
        return not self.skipped

    @property
    def has_decomposition(self) -> bool:
        return bool(self.decomposed)

    def tested(self, mode: str) -> bool:
        return bool(self.forced.get(mode))

    def known(self, mode: str) -> Known | None:
        known = KNOWN_FAILURES.get((mode, self.name))
        failures = self.failures(mode)
        return known if known and failures and all(known.match in s.reason for s in failures) else None

    def status(self, mode: str) -> str:
        """pass, fail, known (a documented failure), skip (every sample skipped) or untested."""
        if not self.tested(mode):
            return "untested"
        if self.failures(mode):
            return "known" if self.known(mode) else "fail"
        return "pass" if any(s.mode == mode and s.status == "pass" for s in self.samples) else "skip"

    def failures(self, mode: str) -> list[SampleResult]:
        return [s for s in self.samples if s.mode == mode and s.status == "fail"]


# Tensor helpers -------------------------------------------------------------------------------------
def exact_clone(tree: Any) -> Any:
    """A deep copy of the tensors in `tree` keeping each one's size, stride and storage offset, and
    keeping tensors that share a storage sharing one (views of a base stay views of its copy)."""
    storages: dict[int, torch.UntypedStorage] = {}

    def one(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if type(value) is not torch.Tensor or value.layout != torch.strided or value.is_quantized:
            return value.clone()
        # set_ makes a plain tensor: the lazy conjugate and negative bits (fft ops use them) are taken
        # off the source view first and put back on the copy, so the copy reads the same values.
        conj, neg = value.is_conj(), value.is_neg()
        raw = value.conj() if conj else value
        raw = torch._neg_view(raw) if neg else raw
        storage = raw.untyped_storage()
        key = storage.data_ptr() if storage.nbytes() else -id(value)
        copy = storages.get(key)
        if copy is None:
            copy = storages[key] = storage.clone()
        with torch.no_grad():
            out = torch.empty(0, dtype=raw.dtype, device=raw.device)
            out.set_(copy, raw.storage_offset(), raw.size(), raw.stride())
        if value.requires_grad:
            out.requires_grad_(True)
        out = torch._neg_view(out) if neg else out
        return out.conj() if conj else out

    return pytree.tree_map(one, tree)


def _storage_key(t: torch.Tensor) -> int | None:
    if t.layout != torch.strided:
        return None
    storage = t.untyped_storage()
    return storage.data_ptr() if storage.nbytes() else None


def alias_map(inputs: Any, output: Any) -> list[tuple[int, ...]]:
    """For each output tensor, the indices of the input tensors sharing its storage."""
    owners: dict[int, list[int]] = {}
    for i, t in enumerate(pytree.tree_leaves(inputs)):
        key = _storage_key(t) if isinstance(t, torch.Tensor) else None
        if key is not None:
            owners.setdefault(key, []).append(i)
    result = []
    for t in pytree.tree_leaves(output):
        key = _storage_key(t) if isinstance(t, torch.Tensor) else None
        result.append(tuple(owners.get(key, ())) if key is not None else ())
    return result


VALUES_DIFFER = "elements differ"  # in every reason about values (rather than structure or errors)


def _max_diff(actual: torch.Tensor, expected: torch.Tensor) -> str:
    if actual.is_floating_point() or actual.is_complex():
        a, e = actual.detach().to(torch.complex128 if actual.is_complex() else torch.float64), \
            expected.detach().to(torch.complex128 if expected.is_complex() else torch.float64)
        same = (a == e) | (a.isnan() & e.isnan())
        diff = (a - e).abs().masked_fill(same, 0).nan_to_num(nan=math.inf)
        bad = int((~same).sum())
        return f"max abs diff {diff.max().item():.3g}, {bad}/{a.numel()} {VALUES_DIFFER}"
    bad = int((actual != expected).sum())
    return f"{bad}/{actual.numel()} {VALUES_DIFFER}"


def compare(expected: Any, actual: Any, rtol: float, atol: float, what: str = "output") -> str | None:
    """None when `actual` matches `expected` under OpInfo's rules, else why not."""
    e_leaves, a_leaves = pytree.tree_leaves(expected), pytree.tree_leaves(actual)
    if len(e_leaves) != len(a_leaves):
        return f"{what}: expected {len(e_leaves)} values, got {len(a_leaves)}"
    for i, (e, a) in enumerate(zip(e_leaves, a_leaves, strict=True)):
        where = what if len(e_leaves) == 1 else f"{what}[{i}]"
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"{where}: expected a tensor, got {type(a).__name__}"
            if a.shape != e.shape or a.dtype != e.dtype:
                return (f"{where}: expected {e.dtype} {tuple(e.shape)}, got {a.dtype} {tuple(a.shape)}")
            try:
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
            except AssertionError:
                return f"{where}: {_max_diff(a, e)} (rtol={rtol:g}, atol={atol:g})"
        elif isinstance(e, (int, float, complex)) and not isinstance(e, bool):
            try:
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
            except (AssertionError, TypeError):
                return f"{where}: expected {e!r}, got {a!r}"
        elif e != a:
            return f"{where}: expected {e!r}, got {a!r}"
    return None


def compare_metadata(expected: Any, actual: Any, what: str) -> str | None:
    """Shapes and dtypes only: for uninitialised outputs."""
    e_leaves, a_leaves = pytree.tree_leaves(expected), pytree.tree_leaves(actual)
    if len(e_leaves) != len(a_leaves):
        return f"{what}: expected {len(e_leaves)} values, got {len(a_leaves)}"
    for e, a in zip(e_leaves, a_leaves, strict=True):
        if isinstance(e, torch.Tensor) and (not isinstance(a, torch.Tensor) or a.shape != e.shape
                                            or a.dtype != e.dtype):
            return f"{what}: expected {e.dtype} {tuple(e.shape)}, got {a!r}"
    return None


def describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


# Recording --------------------------------------------------------------------------------------------
@dataclass
class RecordedCall:
    func: torch._ops.OpOverload
    name: str
    before: tuple[tuple, dict]  # (args, kwargs) before the call
    after: tuple[tuple, dict]  # the same arguments after it (in-place and out= writes)
    output: Any
    rng: torch.Tensor


class Recorder(TorchDispatchMode):
    """Lists the aten overloads a sample reaches below autograd; snapshots calls of `capture` ones."""

    def __init__(self, capture: Callable[[str], bool], per_overload: int = CALLS_PER_OVERLOAD):
        super().__init__()
        self.capture = capture
        self.per_overload = per_overload
        self.overloads: dict[str, torch._ops.OpOverload] = {}
        self.calls: list[RecordedCall] = []
        self._counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = canonical_op_name(func)
        self.overloads.setdefault(name, func)
        if not self.capture(name) or self._counts.get(name, 0) >= self.per_overload:
            return func(*args, **kwargs)
        self._counts[name] = self._counts.get(name, 0) + 1
        rng = torch.get_rng_state()
        before = exact_clone((args, kwargs))
        out = func(*args, **kwargs)
        # One clone of arguments and output together keeps an output that views an argument a view.
        after, output = exact_clone(((args, kwargs), out))
        self.calls.append(RecordedCall(func, name, before, after, output, rng))
        return out


# Decompositions ---------------------------------------------------------------------------------------
_has_decomposition: dict[str, bool] = {}


def has_decomposition(name: str) -> bool:
    found = _has_decomposition.get(name)
    if found is None:
        found = _has_decomposition[name] = name.startswith("aten::") and translation(name) is not None
    return found


def is_random(func: torch._ops.OpOverload) -> bool:
    return torch.Tag.nondeterministic_seeded in func.tags


# OpInfo access ----------------------------------------------------------------------------------------
def load_op_db() -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return list(op_db)


def opinfo_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def select_ops(op_db: Sequence[Any], names: Iterable[str] | None = None, limit: int | None = None) -> list[Any]:
    """OpInfos by full name ('max.reduction_with_dim') or name (every variant of 'max')."""
    chosen = list(op_db)
    if names is not None:
        wanted = set(names)
        chosen = [op for op in chosen if op.name in wanted or opinfo_name(op) in wanted]
        missing = wanted - {op.name for op in chosen} - {opinfo_name(op) for op in chosen}
        if missing:
            raise SystemExit(f"opinfo_routes: no OpInfo named {', '.join(sorted(missing))}")
    return chosen[:limit] if limit is not None else chosen


def opinfo_tolerance(op: Any) -> tuple[float, float]:
    """(rtol, atol) for float32 on the CPU: assert_close's defaults, loosened by the OpInfo's own
    toleranceOverride/precisionOverride decorators (the loosest of its tests, as any of them accepts)."""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    rtol, atol = DEFAULT_RTOL, DEFAULT_ATOL
    for info in op.decorators:
        if isinstance(info, DecorateInfo):
            if info.device_type not in (None, "cpu") or (info.dtypes and torch.float32 not in info.dtypes):
                continue
            if info.active_if is False:
                continue
            decorators = info.decorators
        else:
            decorators = [info]
        for dec in decorators:
            if isinstance(dec, toleranceOverride) and torch.float32 in dec.d:
                rtol, atol = max(rtol, dec.d[torch.float32].rtol), max(atol, dec.d[torch.float32].atol)
            elif isinstance(dec, precisionOverride) and torch.float32 in dec.d:
                atol = max(atol, dec.d[torch.float32])
    return rtol, atol


# Cases ------------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One sample in one variant: `fn(*args, **kwargs)` on fresh exact copies of the inputs."""

    variant: str
    index: int
    fn: Callable
    inputs: tuple[tuple, dict]

    def run(self, within: contextlib.AbstractContextManager | None = None,
            device: torch.device | None = None) -> tuple[Any, tuple[tuple, dict]]:
        """(output, the inputs afterwards); only the call itself runs inside `within`. With `device` (an
        emulated one) the inputs are moved there first, and the results come back as the CPU tensors
        holding the device data, aliasing intact (a view on the device is a view of the same data)."""
        args, kwargs = exact_clone(self.inputs)
        host_inputs = (args, kwargs)
        if device is not None:
            args, kwargs = pytree.tree_map(lambda t: _to_device(t, device), (args, kwargs))
        torch.manual_seed(SEED)  # random ops draw the same numbers in every run
        with within or contextlib.nullcontext():
            out = self.fn(*args, **kwargs)
        if device is None:
            return out, (args, kwargs)
        out, after = emu.to_host((out, (args, kwargs)))
        # the device= arguments went to the device; the comparison wants the sample's own back
        return out, pytree.tree_map(lambda moved, own: own if isinstance(moved, torch.device) else moved,
                                    after, host_inputs)


def _to_device(value: Any, device: torch.device) -> Any:
    """A sample's tensors and its device="cpu" arguments (factory OpInfos pass one) on `device`."""
    if (isinstance(value, torch.device) and value.type == "cpu") or (isinstance(value, str) and value == "cpu"):
        return device
    if not isinstance(value, torch.Tensor):
        return value
    moved = value.detach().to(device)
    return moved.requires_grad_(True) if value.requires_grad else moved


def _out_like(result: Any) -> Any:
    """Out tensors for `result`, filled with values no kernel produces by accident."""
    def one(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point() or t.is_complex():
            return torch.full_like(t, math.nan)
        return torch.full_like(t, 7) if t.dtype != torch.bool else torch.ones_like(t)

    if isinstance(result, torch.Tensor):
        return one(result)
    if isinstance(result, (tuple, list)) and result and all(isinstance(t, torch.Tensor) for t in result):
        return tuple(one(t) for t in result)
    return None


def make_cases(op: Any, samples: int, variants: Sequence[str]) -> Iterator[Case]:
    torch.manual_seed(SEED)  # the same samples in every run of the script
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sample_list = list(islice(op.sample_inputs("cpu", torch.float32), samples))
    for index, sample in enumerate(sample_list):
        inputs = ((sample.input, *sample.args), dict(sample.kwargs))
        if "function" in variants:
            yield Case("function", index, op.op, inputs)
        if "inplace" in variants and op.inplace_variant is not None:
            yield Case("inplace", index, op.inplace_variant, inputs)
        if "out" in variants and op.supports_out:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = _out_like(Case("function", index, op.op, inputs).run()[0])
            except Exception:
                out = None  # the function itself raises: the function case reports it
            if out is not None:
                yield Case("out", index, op.op, (inputs[0], {**inputs[1], "out": out}))


# Routing under test -------------------------------------------------------------------------------------
@contextlib.contextmanager
def forced_routes(chip: str, ops: Iterable[str], route: str) -> Iterator[Any]:
    """Emulate `chip` with `ops` forced to `route` through FL_ROUTE, the highest-precedence override.
    FL_ROUTE is read when the route table is built, so it is restored as soon as emulation is entered."""
    with contextlib.ExitStack() as stack:
        saved = os.environ.get("FL_ROUTE")
        os.environ["FL_ROUTE"] = ",".join(f"{op}={route}" for op in ops)
        try:
            # host=True: the dispatch-mode emulator checks the routes on the host tensors of the sample
            activation = stack.enter_context(torch.fl.emulate(chip, host=True))
        finally:
            if saved is None:
                del os.environ["FL_ROUTE"]
            else:
                os.environ["FL_ROUTE"] = saved
        yield activation


def write_chip(directory: str | Path) -> str:
    path = Path(directory) / "opinfo-chip.toml"
    path.write_text(CHIP_TOML, encoding="utf-8")
    return str(path)


def _route_taken(route: str, ops: Iterable[str]) -> bool:
    wanted = set(ops)
    return any(r["route"] == route and r["op"] in wanted for r in torch.fl.route_stats())


def check_fallback_call(call: RecordedCall, rtol: float, atol: float) -> str | None:
    """cpu_fallback(force_copy=True) on one recorded call: values, written arguments, aliasing."""
    args, kwargs = exact_clone(call.before)
    torch.set_rng_state(call.rng)
    where = f"cpu_fallback({call.name})"
    try:
        result = cpu_fallback(call.func, args, kwargs, force_copy=True)
    except Exception as exc:
        return f"{where} raised {describe(exc)}"
    packet = call.name.rsplit(".", 1)[0]
    if packet in UNINITIALIZED:
        reason = compare_metadata(call.output, result, f"{where} output")
    else:
        expected, actual = pytree.tree_leaves(call.output), pytree.tree_leaves(result)
        garbage = PARTLY_UNINITIALIZED.get(packet, ())
        reason = compare_metadata([expected[i] for i in garbage if i < len(expected)],
                                  [actual[i] for i in garbage if i < len(actual)], f"{where} output") or \
            compare([e for i, e in enumerate(expected) if i not in garbage],
                    [a for i, a in enumerate(actual) if i not in garbage], rtol, atol, f"{where} output")
    if reason:
        return reason
    after_args, after_kwargs = call.after
    for i, argument in enumerate(call.func._schema.arguments):
        if i < len(args):
            expected, actual = after_args[i], args[i]
        elif argument.name in kwargs:
            expected, actual = after_kwargs[argument.name], kwargs[argument.name]
        else:
            continue
        reason = compare(expected, actual, rtol, atol, f"{where} argument '{argument.name}' afterwards")
        if reason:
            return reason
    return schema_aliasing(call.func, args, kwargs, result, where)


def schema_aliasing(func: torch._ops.OpOverload, args: tuple, kwargs: dict, result: Any,
                    where: str) -> str | None:
    """Returns the schema marks as aliasing an argument must alias the caller's tensor: in-place and
    out= returns are that tensor, views share its storage."""
    schema = func._schema
    values = result if len(schema.returns) > 1 else (result,)
    for r, value in zip(schema.returns, values, strict=False):
        if r.alias_info is None or not r.alias_info.before_set:
            continue
        for i, argument in enumerate(schema.arguments):
            if argument.alias_info is not None and argument.alias_info.before_set & r.alias_info.before_set:
                original = args[i] if i < len(args) else kwargs.get(argument.name)
                break
        else:
            continue
        if not isinstance(original, torch.Tensor) or _storage_key(original) is None:
            continue
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if not isinstance(t, torch.Tensor) or _storage_key(t) is None:
                continue
            if r.alias_info.is_write and t is not original and not (
                    _storage_key(t) == _storage_key(original) and t.shape == original.shape):
                return f"{where}: the returned tensor is not the written argument '{argument.name}'"
            if not r.alias_info.is_write and _storage_key(t) != _storage_key(original):
                return f"{where}: the returned view does not alias argument '{argument.name}'"
    return None


@dataclass(frozen=True)
class Settings:
    modes: Sequence[str] = MODES
    samples: int = 3
    variants: Sequence[str] = VARIANTS
    # False: only overloads with a decomposition are forced to fallback (the scope); True:
    # every aten overload a sample reaches, which also tests cpu_fallback on ops without one.
    fallback_all: bool = False
    device_chip: str = DEVICE_CHIP  # the description `device` mode emulates

    def forces(self, mode: str, name: str) -> bool:
        if mode == "device":
            return name.startswith("aten::")  # every sample is tested; nothing is forced
        if mode == "fallback" and self.fallback_all:
            return name.startswith("aten::")
        return has_decomposition(name)


def check_op(op: Any, chip: str, settings: Settings = Settings()) -> OpResult:
    """Run one OpInfo's samples under every mode of `settings`; never raises for a failing op."""
    started = time.perf_counter()
    result = OpResult(opinfo_name(op))
    try:
        # References are plain PyTorch, and the routed runs see only the chip under test, even when
        # routing was active already (FL_DEVICE=emu:..., an activated device).
        with suspended():
            _check_op(op, chip, result, settings)
    except Exception as exc:  # sample generation itself failed: the OpInfo cannot be examined here
        result.skipped = f"sample inputs raise {describe(exc)}"
    result.seconds = time.perf_counter() - started
    return result


def _check_op(op: Any, chip: str, result: OpResult, settings: Settings) -> None:
    if torch.float32 not in op.supported_dtypes("cpu"):
        result.skipped = "no float32 support on the CPU"
        return
    if op.has_nondeterministic_output:
        result.skipped = "outputs not comparable (OpInfo has_nondeterministic_output)"
        return
    rtol, atol = opinfo_tolerance(op)
    overloads: set[str] = set()
    for case in make_cases(op, settings.samples, settings.variants):
        overloads.update(_check_case(case, chip, settings, rtol, atol, result))
    result.overloads = sorted(overloads)
    result.decomposed = sorted(name for name in overloads if has_decomposition(name))
    result.forced = {mode: sorted(name for name in overloads if settings.forces(mode, name))
                     for mode in settings.modes}
    if not overloads and result.samples:
        result.skipped = f"every sample skipped: {result.samples[0].reason}"


def _check_case(case: Case, chip: str, settings: Settings, rtol: float, atol: float,
                result: OpResult) -> set[str]:
    """Check one case in every mode; returns the overloads it reached."""
    def add(mode: str, status: str, reason: str = "") -> None:
        result.samples.append(SampleResult(case.variant, case.index, mode, status, reason))

    def skip_all(reason: str) -> None:
        for mode in settings.modes:
            add(mode, "skip", reason)

    if any(isinstance(t, torch.Tensor) and t.layout != torch.strided for t in pytree.tree_leaves(case.inputs)):
        # Descriptions and their route tables cover the strided kernels of a dispatch key; sparse
        # kernels live on other keys, so an emulated chip has none of them natively.
        skip_all("sparse inputs: routes cover strided kernels only")
        return set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected, expected_inputs = case.run()
        except Exception as exc:
            skip_all(f"reference raises {describe(exc)}")
            return set()
        recorder = Recorder(lambda name: any(settings.forces(m, name) for m in settings.modes))
        try:
            again = case.run(recorder)
        except Exception as exc:
            skip_all(f"reference raises under a dispatch mode: {describe(exc)}")
            return set()
        reached = set(recorder.overloads)
        # Not bitwise: under any dispatch mode some ops take another path (linalg.svdvals computes
        # the singular vectors too, a different LAPACK driver), as they do under emulation.
        if compare((expected, expected_inputs), again, rtol, atol) is not None:
            skip_all("outputs not comparable: two reference runs differ")
            return reached
        expected_aliases = alias_map(expected_inputs, expected)
        for mode in settings.modes:
            forced = [name for name in recorder.overloads if settings.forces(mode, name)]
            if not forced:
                continue  # nothing of this sample takes the route: no test, no entry
            random = mode == "translate" and any(is_random(recorder.overloads[name]) for name in forced)
            m_rtol, m_atol = rtol, atol
            if mode == "translate":
                for name in forced:
                    m_rtol = max(m_rtol, DECOMP_TOLERANCES.get(name, (0, 0))[0])
                    m_atol = max(m_atol, DECOMP_TOLERANCES.get(name, (0, 0))[1])
            reason = _routed_run(case, settings.device_chip if mode == "device" else chip, forced, mode,
                                 m_rtol, m_atol, expected, expected_inputs, expected_aliases)
            if reason is None and mode == "fallback":
                for call in recorder.calls:
                    reason = check_fallback_call(call, rtol, atol)
                    if reason is not None:
                        break
            if random and reason and VALUES_DIFFER in reason:
                # Same seed, but a decomposition of a random op may draw its numbers differently
                # (bernoulli: rand() < p); only its structure and failures to run are comparable.
                add(mode, "skip", f"random: the decomposition draws differently ({reason})")
            else:
                add(mode, "fail" if reason else "pass", reason or "")
    return reached


def _routed_run(case: Case, chip: str, forced: list[str], mode: str, rtol: float, atol: float,
                expected: Any, expected_inputs: Any, expected_aliases: list[tuple[int, ...]]) -> str | None:
    torch.fl.reset_route_stats()
    try:
        if mode == "device":
            with torch.fl.emulate(chip) as activation:
                actual, actual_inputs = case.run(device=activation.device)
        else:
            actual, actual_inputs = case.run(forced_routes(chip, forced, mode))
    except Exception as exc:
        return describe(exc)
    if mode != "device" and not _route_taken(mode, forced):
        return f"no call took the forced {mode} route (forced: {', '.join(forced)})"
    reason = compare(expected, actual, rtol, atol) or \
        compare(expected_inputs, actual_inputs, rtol, atol, "inputs afterwards")
    if reason:
        return reason
    aliases = alias_map(actual_inputs, actual)
    for i, (want, got) in enumerate(zip(expected_aliases, aliases, strict=False)):
        if bool(want) != bool(got):
            return f"output[{i}] " + ("is a new tensor; the reference returns a view of (or writes to) "
                                      "an input" if want else "aliases an input; the reference returns a "
                                      "new tensor")
    return None


# Running and reporting --------------------------------------------------------------------------------
def run(ops: Sequence[Any], settings: Settings = Settings(),
        progress: Callable[[int, int, OpResult], None] | None = None) -> list[OpResult]:
    """Check `ops` (OpInfos) on a temporary emulated chip."""
    results = []
    with tempfile.TemporaryDirectory(prefix="opinfo-routes-") as tmp:
        chip = write_chip(tmp)
        for i, op in enumerate(ops):
            results.append(check_op(op, chip, settings))
            if progress is not None:
                progress(i + 1, len(ops), results[-1])
    return results


def summarize(results: Sequence[OpResult], modes: Sequence[str]) -> dict[str, Any]:
    examined = [r for r in results if r.examined]
    with_decomp = [r for r in examined if r.has_decomposition]
    summary: dict[str, Any] = {
        "opinfos": len(results),
        "examined": len(examined),
        "not_examined": len(results) - len(examined),
        "with_decomposition": len(with_decomp),
        "overloads_decomposed": len({o for r in with_decomp for o in r.decomposed}),
        "modes": {},
    }
    for mode in modes:
        tested = [r for r in examined if r.tested(mode)]
        statuses = [r.status(mode) for r in tested]
        cases = [s for r in tested for s in r.samples if s.mode == mode]
        summary["modes"][mode] = {
            "ops_tested": len(tested),
            "overloads_forced": len({o for r in tested for o in r.forced[mode]}),
            "ops_pass": statuses.count("pass"),
            "ops_fail": statuses.count("fail"),
            "ops_known_failure": statuses.count("known"),
            "ops_all_skipped": statuses.count("skip"),
            "samples_pass": sum(s.status == "pass" for s in cases),
            "samples_fail": sum(s.status == "fail" for s in cases),
            "samples_skipped": sum(s.status == "skip" for s in cases),
            "skip_reasons": _count(s.reason for s in cases if s.status == "skip"),
        }
    return summary


def _count(reasons: Iterable[str]) -> dict[str, int]:
    """How often each reason occurs, by its text up to the first detail."""
    counts: dict[str, int] = {}
    for reason in reasons:
        key = reason.split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def report(results: Sequence[OpResult], modes: Sequence[str], seconds: float, out: Any = None) -> None:
    out = out or sys.stdout
    summary = summarize(results, modes)

    def p(text: str) -> None:
        print(text, file=out)

    p(f"OpInfos: {summary['opinfos']}; examined (float32 samples on the CPU): {summary['examined']}; "
      f"with a decomposition: {summary['with_decomposition']} "
      f"({summary['overloads_decomposed']} distinct aten overloads)")
    for why, n in _count(r.skipped for r in results if r.skipped).items():
        p(f"  not examined: {n} ({why})")
    for mode in modes:
        m = summary["modes"][mode]
        p(f"{mode}: {m['ops_tested']} ops ({m['overloads_forced']} overloads forced): pass {m['ops_pass']}, "
          f"fail {m['ops_fail']}, known failures {m['ops_known_failure']}, every sample skipped "
          f"{m['ops_all_skipped']}; samples: pass {m['samples_pass']}, fail {m['samples_fail']}, "
          f"skipped {m['samples_skipped']}")
        for why, n in m["skip_reasons"].items():
            p(f"  skipped samples: {n} ({why})")
        for r in results:
            if r.status(mode) not in ("fail", "known"):
                continue
            known = r.known(mode)
            p(f"  {'KNOWN' if known else 'FAIL'} {r.name}" + (f": {known.why}" if known else ""))
            for s in r.failures(mode):
                p(f"    {s.variant} sample {s.index}: {s.reason}")
    p(f"runtime: {seconds:.1f} s")


def to_json(results: Sequence[OpResult], settings: Settings, seconds: float, argv: Sequence[str]) -> dict:
    return {
        "command": " ".join(["scripts/opinfo_routes.py", *argv]),
        "torch": torch.__version__,
        "torch_fl": getattr(torch_fl, "__version__", ""),
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "runtime_s": round(seconds, 1),
        "settings": {**asdict(settings), "modes": list(settings.modes), "variants": list(settings.variants)},
        "summary": summarize(results, settings.modes),
        "ops": [{**{k: v for k, v in asdict(r).items() if k != "samples"},
                 "status": {mode: r.status(mode) for mode in settings.modes},
                 "samples": [asdict(s) for s in r.samples]} for r in results],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", help="comma-separated OpInfo names ('max' or 'max.reduction_with_dim')")
    parser.add_argument("--mode", choices=(*ALL_MODES, "both"), default="both",
                        help="translate, fallback, both (the two), or device: samples moved to an emulated "
                             "chip (--device-chip) with its own routes")
    parser.add_argument("--device-chip", default=DEVICE_CHIP,
                        help=f"description emulated in device mode (default {DEVICE_CHIP})")
    parser.add_argument("--samples", type=int, default=3, help="float32 samples per OpInfo (default 3)")
    parser.add_argument("--limit", type=int, help="only the first N selected OpInfos")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, of {', '.join(VARIANTS)} (default: all)")
    parser.add_argument("--fallback-all", action="store_true",
                        help="force every aten overload reached to fallback, not only decomposable ones")
    parser.add_argument("--json", type=Path, help="write the machine-readable result here")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(sorted(unknown))}; choose from {', '.join(VARIANTS)}")
    settings = Settings(MODES if args.mode == "both" else (args.mode,), args.samples, variants,
                        args.fallback_all, args.device_chip)

    started = time.perf_counter()
    ops = select_ops(load_op_db(), args.ops.split(",") if args.ops else None, args.limit)

    def progress(i: int, n: int, r: OpResult) -> None:
        if not args.quiet:
            states = r.skipped or ", ".join(f"{m} {r.status(m)}" for m in settings.modes if r.tested(m)) \
                or "nothing to force (no decomposition)"
            print(f"[{i}/{n}] {r.name}: {states} ({r.seconds:.1f} s)", file=sys.stderr, flush=True)

    results = run(ops, settings, progress)
    seconds = time.perf_counter() - started
    report(results, settings.modes, seconds)
    if args.json:
        command = sys.argv[1:] if argv is None else list(argv)
        args.json.write_text(json.dumps(to_json(results, settings, seconds, command), indent=1) + "\n",
                             encoding="utf-8")
    return 1 if any(r.status(m) == "fail" for r in results for m in settings.modes) else 0


if __name__ == "__main__":
    sys.exit(main())
