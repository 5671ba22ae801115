"""The chip's slow-op list: each native op of a model timed against its route alternatives.

"Native" says a kernel exists, not that it is fast: a vendor registers an op by a slow generic path, or a
dtype through a cast. For every (op, dtype) a model's step calls natively on a device, this module takes
the op's first arguments of a real step (so shapes are the model's), and times

- the device kernel (the op as the device dispatches it, routing active),
- ``translate``: torch-fl's translation of the op (its decomposition, whose sub-ops route as usual),
- ``kernel``: a registered kernel (torch.fl.register_kernel, ``ops.kernels``) against the native kernel it
  overrides, on a real device,
- ``reference``: the reference device (the CPU) with the arguments copied there, where the device is not
  the CPU itself; an emulated chip computes on the CPU, so there it would time the emulation,

in rounds of interleaved blocks (the order rotates each round), with one intra-op thread (as
OMP_NUM_THREADS=1: the CPU and a chip's host code are timed alike, and a loaded machine disturbs less). Each
round gives one ratio device time / alternative time; the speedup is their median, and an alternative makes
the op ``slow`` on this device only when three rounds in four find it at least SLOW times faster (the lower
quartile of the ratios): on a shared machine a burst of load in a few blocks moves single ratios by 2x and
more, and the median alone called ops slow that a rerun found fast. Otherwise the op is ``measured``. The verdicts go into a user
description overlay (a description file that ``extends`` the chip's own: ``[ops.measured]`` and
``[ops.slow]``, op -> dtypes), which coverage and grade read ("native but slow").
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from .._names import RouteKind
from ..report import Report, Section, Table, progress, stage
from .model import ModelSpec

SLOW = 1.25  # an alternative this many times faster (lower quartile of the paired ratios) makes an op slow
ROUNDS = 15  # timed rounds per op: each times every candidate once, in a rotating order
BLOCK_SECONDS = 1e-3  # calls per timed block: enough for about this long (at least one)
MAX_REPS = 1000
# Ops that are bookkeeping, not compute: their time is the dispatcher's on any device.
SKIPPED = frozenset({"aten::_local_scalar_dense.default", "aten::_to_copy.default", "aten::copy_.default",
                     "aten::empty.memory_format", "aten::empty_strided.default", "aten::detach.default",
                     "aten::alias.default", "aten::lift_fresh.default", "aten::set_.source_Storage_storage_offset",
                     "aten::resize_.default", "aten::zero_.default", "aten::fill_.Scalar"})


def op_name(func: Any) -> str:
    """aten::gelu.default for torch.ops.aten.gelu.default (the route table's names)."""
    return f"{func._schema.name}.{func._overloadname}"


@dataclass
class Sample:
    """An (op, dtype) the step called, with the arguments of its first call (cloned)."""

    func: Any
    dtype: str | None
    route: RouteKind
    args: tuple
    kwargs: dict
    kernel: Callable | None = None  # the registered kernel of a kernel-routed op

    @property
    def op(self) -> str:
        return op_name(self.func)


@dataclass
class Timing:
    op: str
    dtype: str | None
    route: RouteKind
    device_s: float
    alternatives: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> {seconds, speedup, low}
    skipped: dict[str, str] = field(default_factory=dict)  # alternative -> why it was not timed

    @property
    def faster(self) -> str | None:
        """The fastest alternative at least SLOW times faster than the device kernel in three rounds of four
        (its lower-quartile ratio), if any."""
        clear = {name: alt for name, alt in self.alternatives.items() if alt.get("low", alt["speedup"]) >= SLOW}
        best = max(clear.items(), key=lambda kv: kv[1]["speedup"], default=None)
        return best[0] if best is not None else None

    @property
    def verdict(self) -> str:
        return "slow" if self.faster else "measured"

    def row(self) -> dict[str, Any]:
        return {"op": self.op, "dtype": self.dtype, "route": self.route, "device_s": self.device_s,
                "alternatives": self.alternatives, "skipped": self.skipped, "verdict": self.verdict,
                "faster": self.faster}


def _on(value: Any, device: torch.device) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == device.type


class _Recorder(TorchDispatchMode):
    """Keeps the first call of each (op, dtype) whose route is native (or a kernel over a native op)."""

    def __init__(self, device: torch.device, table: Any, kernels: bool) -> None:
        super().__init__()
        self.device, self.table, self.kernels = device, table, kernels
        self.samples: dict[tuple[str, str | None], Sample] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        from ..routing.router import first_dtype

        kwargs = kwargs or {}
        name = op_name(func)
        sample = None
        if name.startswith("aten::") and name not in SKIPPED and not func.is_view:
            key = (name, first_dtype(args, kwargs))
            if key not in self.samples and any(_on(a, self.device) for a in tree_leaves((args, kwargs))):
                sample = self._sample(func, key, args, kwargs)
        out = func(*args, **kwargs)
        if sample is not None:  # (kept once the call worked: a call that raises is nobody's kernel to time)
            self.samples[key] = sample
        return out

    def _sample(self, func: Any, key: tuple[str, str | None], args: tuple, kwargs: dict) -> Sample | None:
        route = self.table.route(*key)
        kind = route.kind
        if kind is RouteKind.KERNEL and not (self.kernels and self.table.is_native(*key)):
            return None
        if kind not in (RouteKind.NATIVE, RouteKind.KERNEL):
            return None
        clone = tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
        return Sample(func, key[1], kind, clone[0], clone[1], route.kernel)


def collect(spec: ModelSpec, device: str, *, train: bool = True) -> tuple[list[Sample], str]:
    """One step of `spec` on `device` with routing active; the (op, dtype) pairs it calls natively (and the
    kernel-routed ones over a native kernel, on a real device), each with its first arguments, and the name
    of the device's description."""
    from ..device import is_emulated
    from ..routing import activated
    from ..routing.current import use_device
    from .bench import _step_fn

    dev = use_device(device)
    model = copy.deepcopy(spec.model).to(dev)
    inputs = tree_map(lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t, spec.inputs)
    with activated(device) as activation:
        table = activation.table
        step = _step_fn(spec, model, inputs, train)
        step()  # (the first step creates optimizer state: its ops are not the step's)
        recorder = _Recorder(dev, table, kernels=not is_emulated(dev))
        with recorder:
            step()
    return list(recorder.samples.values()), table.description.name


def _reps(call: Callable[[], Any], sync: Callable[[], None]) -> int:
    sync()
    start = time.perf_counter()
    call()
    sync()
    once = max(time.perf_counter() - start, 1e-7)
    return max(1, min(MAX_REPS, int(BLOCK_SECONDS / once)))


def paired_speedups(candidates: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], sync: Callable[[], None],
                    rounds: int = ROUNDS) -> tuple[float, dict[str, dict[str, float]]]:
    """Time each candidate (name -> (context factory, call)) in `rounds` rounds, the order rotating each
    round; 'device' is the one the others are compared with. Returns the device's median seconds per call
    and, per alternative, its median seconds, its speedup (the median over rounds of device / alternative:
    a ratio of neighbouring blocks, so load that lasts a round divides out) and `low`, the lower quartile
    of those ratios."""
    names = list(candidates)
    per_call: dict[str, list[float]] = {name: [] for name in names}
    reps: dict[str, int] = {}
    for name, (context, call) in candidates.items():
        with context():
            call()  # warm: first-call set-up (caches, lazy imports) is nobody's speed
            reps[name] = _reps(call, sync)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            context, call = candidates[name]
            with context():
                sync()
                start = time.perf_counter()
                for _ in range(reps[name]):
                    call()
                sync()
                per_call[name].append((time.perf_counter() - start) / reps[name])
    device = per_call["device"]
    out = {}
    for name, times in per_call.items():
        if name != "device":
            ratios = sorted(d / t for d, t in zip(device, times, strict=True) if t > 0)
            out[name] = {"seconds": statistics.median(times), "speedup": statistics.median(ratios),
                         "low": ratios[(len(ratios) - 1) // 4]}
    return statistics.median(device), out


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One intra-op thread and denormals flushed (in-place ops repeated on one input shrink it towards
    zero, and denormal arithmetic is many times slower on CPUs) for the block."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    flushed = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        if flushed:
            torch.set_flush_denormal(False)


def time_sample(sample: Sample, device: str, *, rounds: int = ROUNDS) -> Timing:
    """The device kernel of `sample` against its alternatives (module docstring)."""
    from .. import runtime
    from ..routing import activated, suspended
    from ..routing.current import use_device
    from ..routing.translate import is_composite_implicit, translation

    dev = use_device(device)
    func, args, kwargs = sample.func, sample.args, sample.kwargs
    timing = Timing(sample.op, sample.dtype, sample.route, 0.0)

    def routed() -> contextlib.AbstractContextManager:
        return activated(device)

    candidates: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    if sample.route is RouteKind.KERNEL:  # the native kernel under it, against the registered one
        candidates["device"] = (suspended, lambda: func(*args, **kwargs))
        candidates["kernel"] = (routed, lambda: func(*args, **kwargs))
    else:
        candidates["device"] = (routed, lambda: func(*args, **kwargs))
        fn = None if is_composite_implicit(sample.op) else translation(sample.op)
        if fn is None:
            timing.skipped["translate"] = "no translation (decomposition) for this op"
        elif _works(routed, fn, args, kwargs):
            candidates["translate"] = (routed, lambda: fn(*args, **kwargs))
        else:
            timing.skipped["translate"] = "the translation does not take these arguments"
    why_not = _no_reference(dev)
    if why_not:
        timing.skipped["reference"] = why_not
    else:
        with activated(device):
            host = tree_map(lambda t: t.detach().to("cpu") if _on(t, dev) else t, (args, kwargs))
        candidates["reference"] = (suspended, lambda: func(*host[0], **host[1]))
    if len(candidates) == 1:  # nothing to compare with: the device's time alone, against itself
        candidates["itself"] = candidates["device"]
        rounds = 1
    with one_thread():
        timing.device_s, alternatives = paired_speedups(candidates, lambda: runtime.synchronize(dev),
                                                        rounds=rounds)
    timing.alternatives = {name: alt for name, alt in alternatives.items() if name != "itself"}
    return timing


def _no_reference(dev: torch.device) -> str | None:
    """Why the reference device (the CPU) is not timed for `dev`, or None when it is."""
    from ..device import is_emulated

    if dev.type == "cpu":
        return "the device is the reference (the CPU)"
    if is_emulated(dev):
        return "an emulated chip computes on the CPU: it would time the emulation"
    return None


def _works(context: Callable[[], Any], fn: Callable, args: tuple, kwargs: dict) -> bool:
    """Whether a translation computes these arguments (some return NotImplemented for inputs they do not
    cover, or raise)."""
    try:
        with context():
            return fn(*args, **kwargs) is not NotImplemented
    except Exception:  # (any failure means: not an alternative for these inputs)
        return False


def ops_bench(spec: ModelSpec, device: str, *, train: bool = True, rounds: int = ROUNDS,
              ops: list[str] | None = None) -> Report:
    """Time every native (op, dtype) of a step of `spec` on `device` against its alternatives; the report's
    data has the rows (``timings``) and the verdicts (``verdicts``: op -> {dtype: measured | slow})."""
    progress(f"recording one {'training step' if train else 'forward'} of {spec.name} on {device}")
    samples, description = collect(spec, device, train=train)
    return _measure(samples, spec.name, device, description, train=train, rounds=rounds, ops=ops)


def _measure(samples: list[Sample], model: str, device: str, description: str, *, train: bool, rounds: int,
             ops: list[str] | None) -> Report:
    if ops:
        samples = [s for s in samples if s.op in ops or s.op.rsplit(".", 1)[0] in ops]
    timings: list[Timing] = []
    failed: list[dict[str, Any]] = []
    with stage(f"timing {len(samples)} native (op, dtype) pairs on {device}", total=len(samples),
               unit="ops") as counter:
        for sample in samples:
            try:
                timings.append(time_sample(sample, device, rounds=rounds))
            except Exception as exc:  # (a kernel that fails when called again: named, not measured)
                failed.append({"op": sample.op, "dtype": sample.dtype, "error": f"{type(exc).__name__}: {exc}"})
            counter.advance()
    data = {"model": model, "device": device, "description": description, "train": train, "rounds": rounds,
            "slow_ratio": SLOW, "timings": [t.row() for t in timings], "verdicts": verdicts(timings),
            "ops": ops or None, "failed": failed}
    return report(data)


def opinfo_samples(device: str, ops: list[str] | None = None) -> tuple[list[Sample], str]:
    """The native (op, dtype) pairs that the first float32 sample of each of PyTorch's OpInfos calls on
    `device` (those named by `ops` only, when given), with their arguments: the table's native set, where no
    model says which ops matter."""
    frozen = torch.backends.flags_frozen()
    try:
        return _opinfo_samples(device, ops)
    finally:
        if not frozen:
            # PyTorch's test utilities freeze torch.backends' global flags when they load (disable_global_flags):
            # the caller's process must still be able to set cudnn/mkldnn flags afterwards
            torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True


def _opinfo_samples(device: str, ops: list[str] | None) -> tuple[list[Sample], str]:
    from ..device import is_emulated
    from ..errors import FallbackWarning
    from ..routing import activated
    from ..routing.current import use_device

    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as exc:  # (op_db imports expecttest, a test-only dependency of PyTorch)
        raise RuntimeError(f"torchfl ops-bench without MODEL times PyTorch's OpInfo samples, which need the "
                           f"package expecttest ({exc}). Fix: pip install expecttest, or name a model") from None
    wanted = {op.removeprefix("aten::").split(".", 1)[0] for op in ops or ()}
    dev = use_device(device)
    with activated(device) as activation:
        recorder = _Recorder(dev, activation.table, kernels=not is_emulated(dev))
        infos = [info for info in op_db if not wanted or {info.name, info.aten_name} & wanted]
        with stage(f"recording the float32 samples of {len(infos)} OpInfos on {device}", total=len(infos),
                   unit="ops") as counter, warnings.catch_warnings():
            # the samples call every op PyTorch tests, fallbacks too: their warnings say nothing of a model
            warnings.simplefilter("ignore", FallbackWarning)
            for info in infos:
                _record_sample(info, dev, recorder)
                counter.advance()
    return list(recorder.samples.values()), activation.table.description.name


def _record_sample(info: Any, dev: torch.device, recorder: _Recorder) -> None:
    try:
        sample = next(iter(info.sample_inputs(dev, torch.float32, requires_grad=False)), None)
        if sample is None:
            return
        with recorder:
            info.op(sample.input, *sample.args, **sample.kwargs)
    except Exception:  # (an OpInfo the device cannot run, or that has no float32: not measured)
        return


def opinfo_ops_bench(device: str, *, ops: list[str] | None = None, rounds: int = ROUNDS) -> Report:
    """ops_bench over PyTorch's OpInfo samples instead of a model's step."""
    samples, description = opinfo_samples(device, ops)
    return _measure(samples, "PyTorch's OpInfo samples (float32)", device, description, train=False,
                    rounds=rounds, ops=ops)


def verdicts(timings: list[Timing]) -> dict[str, dict[str, str]]:
    """op -> {dtype: 'measured' | 'slow'} (a dtype-less call as 'any')."""
    out: dict[str, dict[str, str]] = {}
    for t in timings:
        out.setdefault(t.op, {})[t.dtype or "any"] = t.verdict
    return out


def report(data: dict[str, Any]) -> Report:
    rows = sorted(data["timings"], key=lambda r: (r["verdict"] != "slow", -r["device_s"]))
    slow = [r for r in rows if r["verdict"] == "slow"]

    def alt(row: dict[str, Any], name: str) -> str:
        found = row["alternatives"].get(name)
        return f"{found['speedup']:.2f}x" if found else "-"

    table = Table(["op", "dtype", "route", "device us", "translate", "kernel", "reference", "verdict"],
                  [[r["op"], r["dtype"] or "-", r["route"], r["device_s"] * 1e6, alt(r, "translate"),
                    alt(r, "kernel"), alt(r, "reference"),
                    r["verdict"] + (f" ({r['faster']} faster)" if r["faster"] else "")] for r in rows])
    section = Section("Native ops against their alternatives", text=[
        f"Each alternative's column is its speedup over the device kernel: the median over {data['rounds']} "
        f"rounds of device time / alternative time, blocks interleaved, one intra-op thread. An alternative "
        f"{data['slow_ratio']}x faster or more in three rounds of four (the ratios' lower quartile) makes the "
        f"op 'slow'."], tables=[table])
    summary = [("model", data["model"]), ("device", f"{data['device']} (description '{data['description']}')"),
               ("measured", f"{len(rows)} native (op, dtype) pairs, {len(slow)} slow")]
    if "overlay" in data:
        summary.append(("overlay", data["overlay"]))
    unmatched = [op for op in data.get("ops") or () if not any(
        r["op"] == op or r["op"].rsplit(".", 1)[0] == op for r in rows)]
    notes = [f"--op {op} matched no native op of {data['model']} on {data['device']} (not called, not native "
             f"there, or a bookkeeping op ops-bench does not time): nothing measured for it" for op in unmatched]
    warnings = notes + [f"{f['op']} ({f['dtype']}) was not measured: called again with its recorded arguments "
                        f"it raised {f['error'].splitlines()[0][:200]}" for f in data.get("failed", [])]
    if slow:
        one = len(slow) == 1
        warnings.append(f"{len(slow)} native op{'' if one else 's'} {'is' if one else 'are'} slower on "
                        f"{data['device']} than an alternative: " + ", ".join(
                            f"{r['op']} ({r['dtype']}: {r['faster']} "
                            f"{r['alternatives'][r['faster']]['speedup']:.1f}x faster)" for r in slow[:5]))
    return Report(f"torchfl ops-bench: {data['model']}", data, summary, [section], warnings)


# The overlay ---------------------------------------------------------------------------------------------
def preferred_translations(timings: list[dict[str, Any]]) -> list[str]:
    """The ops to route to their translation when the user opts in (--prefer): every dtype measured of the op
    is slow and its translation is the faster alternative (ops.translate forces an op for all dtypes, so a
    dtype where the native kernel holds its own keeps the op native)."""
    by_op: dict[str, list[dict[str, Any]]] = {}
    for row in timings:
        by_op.setdefault(row["op"], []).append(row)
    return sorted(op for op, rows in by_op.items()
                  if all(r["verdict"] == "slow" and r["faster"] == RouteKind.TRANSLATE for r in rows))


def write_overlay(path: str | Path, description: str, found: dict[str, dict[str, str]], *,
                  prefer: list[str] = ()) -> dict[str, Any]:
    """Write (or update) the user description overlay `path`: a description named `description` that
    extends the description of that name, with [ops.measured] and [ops.slow] (op -> dtypes). An existing
    overlay keeps its other keys and its verdicts for pairs not measured now; the pairs measured now
    replace theirs. `prefer`: ops added to the overlay's ops.translate (the opt-in route preference; a list
    replaces the extended description's, so a new one starts from that description's list). Returns the
    written data."""
    from .. import _toml

    path = Path(path)
    data: dict[str, Any] = _toml.loads(_toml.read_text(path)) if path.exists() else {
        "schema": 1, "name": description, "extends": description}
    if data.get("name") != description:
        from ..errors import DescriptionError

        raise DescriptionError(
            f"this overlay describes '{data.get('name')}', not '{description}', the chip measured now. Fix: "
            f"write the measurements of '{description}' to another file (--overlay FILE)", path=str(path))
    ops = data.setdefault("ops", {})
    measured, slow = ops.setdefault("measured", {}), ops.setdefault("slow", {})
    for op, by_dtype in found.items():
        for dtype, verdict in by_dtype.items():
            if dtype == "any":
                continue  # (a dtype-less call: the keys are per dtype)
            for table, wanted in ((measured, True), (slow, verdict == "slow")):
                dtypes = [d for d in table.get(op, []) if d != dtype] + ([dtype] if wanted else [])
                if dtypes:
                    table[op] = sorted(dtypes)
                else:
                    table.pop(op, None)
    if prefer:
        if "translate" not in ops:
            from ..description import registry

            ops["translate"] = list(registry.descriptions()[description].data["ops"]["translate"])
        ops["translate"] += [op for op in prefer if op not in ops["translate"]]
    path.write_text("# written by torchfl ops-bench: native ops measured on this machine, and the ones an "
                    "alternative beats\n" + _toml.dumps(data), encoding="utf-8")
    return data


def slow_dtypes(desc: Any, op: str) -> list[str]:
    """The dtypes [ops.slow] of `desc` lists for `op` (its overload's entry, else its base name's)."""
    table = desc.data.get("ops", {}).get("slow", {})
    found = table.get(op)
    return list(found if found is not None else table.get(op.rsplit(".", 1)[0], []))


def native_but_slow(data: dict[str, Any], desc: Any) -> Section | None:
    """Mark coverage's native rows whose (op, dtype) the description's [ops.slow] lists (``"slow": true``),
    count them in its summary (``native_slow_calls``, ``native_slow``), and return their section (None when
    there are none): native ops that run, but that ops-bench found an alternative faster for."""
    rows = [op for op in data["ops"] if op["route"] == RouteKind.NATIVE and op["dtype"] in slow_dtypes(desc, op["op"])]
    for op in rows:
        op["slow"] = True
    top = [op for op in rows if not op["via"]]
    data["summary"]["native_slow_calls"] = sum(op["calls"] for op in top)
    data["summary"]["native_slow"] = [{"op": op["op"], "dtype": op["dtype"], "calls": op["calls"]} for op in top]
    if not rows:
        return None
    source = desc.path or desc.name
    return Section(f"Native but slow on {data['device']}", text=[
        f"These ops run natively, but `torchfl ops-bench` found an alternative (a translation, a registered "
        f"kernel or the CPU) faster on this chip: [ops.slow] of {source}. Give them a better kernel "
        f"(torch.fl.register_kernel), or route them to the faster alternative (FL_ROUTE=OP=translate)."],
        tables=[Table(["op", "dtype", "calls", "via translation of"],
                      [[op["op"], op["dtype"] or "-", op["calls"],
                        " > ".join(v["op"] for v in op["via"]) or "-"] for op in rows])])
