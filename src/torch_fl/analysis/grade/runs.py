"""grade's measurements: real runs on the device, the distributed preflight, coverage, compare, bench.

Every run is an :class:`Outcome`: an exception is the run's result (the device could not do it), never a
crash of grade. The judges in levels.py turn these into PASS / FAIL / NOT MEASURED.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..._names import RouteKind
from ...device import ResolvedDevice
from ...errors import UnsupportedOperatorError
from ...report import Report
from ..model import ModelSpec

PRECISION_DTYPE = "float32"
PREFLIGHT_RANKS = 2
PREFLIGHT_STEP_S = 30.0  # each preflight step (exchange, each checked collective) may take this long
PREFLIGHT_TIMEOUT_S = 120.0  # the whole job: ranks importing torch on a busy host, then the preflight


@dataclass
class Target:
    """What is graded: the model, the device as given and as resolved once (the description that governs
    it, where it runs), and the reference device's type. The measurements read these; none resolves again."""

    spec: ModelSpec
    device: str
    reference: str
    resolved: ResolvedDevice
    reference_type: str  # the torch device type of `reference` ('cpu')

    @property
    def desc(self) -> Any:
        return self.resolved.description

    @property
    def dev(self) -> torch.device:
        return self.resolved.device

    @property
    def emulated(self) -> bool:
        return self.resolved.emulated


@dataclass
class Outcome:
    """One real run on the device: whether it completed, and what it showed."""

    ok: bool
    seconds: float
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_type: str | None = None

    def data(self) -> dict[str, Any]:
        return {"ok": self.ok, "seconds": self.seconds, **self.detail,
                **({"error": self.error, "error_type": self.error_type} if not self.ok else {})}


# Real runs on the device -------------------------------------------------------------------------------
def _first_lines(exc: BaseException, lines: int = 2) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(line.strip() for line in text.splitlines()[:lines])


def _attempt(fn: Callable[[], dict[str, Any]]) -> Outcome:
    """Run one measurement; any exception is its result (the device could not do it), not a crash."""
    start = time.perf_counter()
    try:
        detail = fn()
    except Exception as exc:  # a device run may fail in any layer (routing, autograd, the compiler)
        return Outcome(False, time.perf_counter() - start, error=_first_lines(exc),
                       error_type=type(exc).__name__)
    return Outcome(True, time.perf_counter() - start, detail)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _device_copy(target: Target, inputs: tuple | None = None) -> tuple[torch.nn.Module, tuple]:
    # Copied outside routing: deepcopy allocates storages in dtypes (uint8) a small chip may not have.
    model = copy.deepcopy(target.spec.model).to(target.dev)
    moved = tree_map(lambda t: t.to(target.dev) if isinstance(t, torch.Tensor) else t,
                     copy.deepcopy(target.spec.inputs if inputs is None else inputs))
    return model, moved


def _routed(target: Target) -> contextlib.AbstractContextManager:
    from ...routing import activated

    return activated(target.device)


def _out_dtype(output: Any) -> str | None:
    floats = [t for t in _tensors(output) if t.is_floating_point()]
    return str(floats[0].dtype).removeprefix("torch.") if floats else None


def _loss_value(loss: torch.Tensor) -> float:
    return float(loss.detach().float().cpu())


def train_step(target: Target) -> Outcome:
    """Forward, loss, backward and an AdamW step on the device with routing active."""
    from ... import runtime

    def run() -> dict[str, Any]:
        model, inputs = _device_copy(target)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        with _routed(target):
            output = model(*inputs)
            loss = target.spec.loss(output, inputs)
            loss.backward()
            optimizer.step()
            runtime.synchronize(target.dev)
        return {"loss": _loss_value(loss), "output_dtype": _out_dtype(output)}
    return _attempt(run)


def autocast_step(target: Target) -> Outcome:
    """Forward and loss under torch.fl.autocast in the description's dtype, backward outside it."""
    from ... import runtime

    dtype = target.desc.autocast_dtype

    def run() -> dict[str, Any]:
        model, inputs = _device_copy(target)
        model.train()
        with _routed(target):
            # dtype given explicitly: for emu:NAME the torch device is the CPU, whose own description
            # would pick the CPU's autocast dtype instead of the emulated chip's.
            with runtime.autocast(target.dev, dtype=dtype):
                output = model(*inputs)
                loss = target.spec.loss(output, inputs)
            loss.backward()
            runtime.synchronize(target.dev)
        return {"dtype": dtype, "loss": _loss_value(loss), "output_dtype": _out_dtype(output)}
    return _attempt(run)


def halved_inputs(inputs: tuple) -> tuple | None:
    """The inputs with dim 0 of every tensor halved, or None when some tensor has no dim 0 to halve."""
    tensors = _tensors(inputs)
    if not tensors or any(t.dim() == 0 or t.shape[0] < 2 for t in tensors):
        return None
    return tree_map(lambda t: t[: t.shape[0] // 2].clone() if isinstance(t, torch.Tensor) else t, inputs)


def _shapes(inputs: tuple) -> list[list[int]]:
    return [list(t.shape) for t in _tensors(inputs)]


def forward_at(target: Target, inputs: tuple, model: torch.nn.Module | None = None) -> Outcome:
    """An inference forward pass on the device (routing active) with the given inputs; `model` (already
    on the device, e.g. compiled) or else a fresh copy of the factory's."""
    from ... import runtime

    def run() -> dict[str, Any]:
        if model is None:
            net, args = _device_copy(target, inputs)
        else:
            net = model
            args = tree_map(lambda t: t.to(target.dev) if isinstance(t, torch.Tensor) else t, inputs)
        net.eval()
        with _routed(target), torch.no_grad():
            output = net(*args)
            runtime.synchronize(target.dev)
        return {"input_shapes": _shapes(args), "output_shapes": _shapes(output)}
    return _attempt(run)


def compile_step(target: Target) -> tuple[Outcome, torch.nn.Module | None]:
    """torch.compile with the description's backend, then a forward + loss + backward on the device.
    Returns the compiled model too (when it ran), for the second-shape check."""
    from ... import runtime

    section = target.desc.section("compile")
    compiled: list[torch.nn.Module] = []

    def run() -> dict[str, Any]:
        model, inputs = _device_copy(target)
        model.train()
        # torch.fl.compile: the description's backend and dynamic-shape policy, through the cache.
        from ...compiler import compile as fl_compile

        compiled.append(fl_compile(model, device=target.dev))
        with _routed(target):
            output = compiled[0](*inputs)
            loss = target.spec.loss(output, inputs)
            loss.backward()
            runtime.synchronize(target.dev)
        return {"backend": section["backend"], "dynamic_shapes": section["dynamic_shapes"],
                "loss": _loss_value(loss)}
    outcome = _attempt(run)
    return outcome, compiled[0] if outcome.ok else None


# Distributed preflight ---------------------------------------------------------------------------------
@dataclass
class PreflightPlan:
    """Whether and how grade runs torch.fl.distributed's preflight: `device` per rank (None: acc{rank}),
    or `why` not."""

    world: int = 0
    device: str | None = None
    what: str = ""
    why: str = ""


def plan_preflight(target: Target, requested: bool) -> PreflightPlan:
    from ... import runtime

    if target.emulated:
        return PreflightPlan(why=f"emulated chip: it has no collective library, so a preflight here would "
                                 f"check the host's {target.desc.collective_backend}, not "
                                 f"{target.desc.name}'s")
    if not requested:
        return PreflightPlan(why="not requested (--no-preflight)")
    if target.dev.type == "cpu":
        world, device = PREFLIGHT_RANKS, "cpu"  # every rank on the host, as torch.fl.distributed does
    else:
        world, device = min(PREFLIGHT_RANKS, runtime.device_count(target.dev)), None
        if world < PREFLIGHT_RANKS:
            return PreflightPlan(why=f"needs {PREFLIGHT_RANKS} {target.dev.type} devices and this machine "
                                     f"has {world}: run torch.fl.distributed.init_process_group() under "
                                     f"torchrun --nproc-per-node {PREFLIGHT_RANKS} where there are two")
    what = (f"torch.fl.distributed.init_process_group in {world} local ranks started by torchrun's launcher "
            f"({'all on the CPU' if device else 'acc0, acc1'}), whose preflight compares the ranks and runs "
            f"checked collectives")
    return PreflightPlan(world, device, what)


def preflight_rank(device: str | None) -> dict[str, Any]:
    """One rank of grade's preflight (run by torch_fl.distributed.launch in its own process)."""
    import torch.distributed as dist

    from ... import distributed

    # timeout=0: torch's own collective timeout and no watchdog thread; the preflight's steps still
    # time out (PREFLIGHT_STEP_S), and the launcher ends ranks that outlive PREFLIGHT_TIMEOUT_S.
    report = distributed.init_process_group(device=device, timeout=0, preflight=True,
                                            preflight_timeout=PREFLIGHT_STEP_S)
    try:
        return {"summary": report.summary(), "backend": report.backend, "world_size": report.world_size,
                "rows": report.rows}
    finally:
        dist.destroy_process_group()


def run_preflight(plan: PreflightPlan) -> Outcome:
    """The preflight in `plan.world` fresh processes, as a distributed job's first step would run it."""
    def run() -> dict[str, Any]:
        from ...distributed.launch import failure_text, run_local  # inside: a broken import is the result

        results = run_local(preflight_rank, plan.device, nproc=plan.world, deadline_s=PREFLIGHT_TIMEOUT_S,
                            name="torchfl-grade")
        if not all(r.ok for r in results):
            raise RuntimeError(failure_text(results))
        return results[0].value
    return _attempt(run)


# Measurements ------------------------------------------------------------------------------------------
@dataclass
class Measurements:
    coverage: dict[str, Any] | None = None
    coverage_report: Report | None = None
    compare: dict[str, Any] | None = None
    compare_report: Report | None = None
    bench: dict[str, Any] | None = None
    bench_report: Report | None = None
    runs: dict[str, Any] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        return {"coverage": self.coverage, "compare": self.compare, "bench": self.bench, "runs": self.runs}


def measure_coverage(target: Target, found: Measurements) -> None:
    from ..coverage import coverage

    report = coverage(target.spec, target.resolved, train=True)
    summary = report.data["summary"]
    found.coverage_report = report
    found.coverage = {**summary,
                      "unsupported": [{"op": op["op"], "dtype": op["dtype"], "calls": op["calls"],
                                       "modules": [m["module"] for m in op["modules"]]}
                                      # the model's own calls whose translation chain stops somewhere
                                      for op in report.data["ops"]
                                      if op["verdict"] == RouteKind.UNSUPPORTED and not op["via"]],
                      "notes": report.data["notes"]}


def measure_compare(target: Target, found: Measurements) -> None:
    from ..compare import CompareError, compare

    try:
        report = compare(target.spec, target.device, target.reference, dtype=PRECISION_DTYPE, train=True)
    except (UnsupportedOperatorError, CompareError) as exc:
        found.compare = {"error": _first_lines(exc), "error_type": type(exc).__name__}
        return
    found.compare, found.compare_report = report.data, report


SETTLE_FACTOR = 8  # an undecided alignment is measured up to this many times the requested steps ...
SETTLE_SECONDS = 120.0  # ... while the timing has taken less than this


def measure_bench(target: Target, found: Measurements, steps: int, warmup: int,
                  settled: Callable[[dict[str, Any]], bool] | None = None) -> None:
    """bench with routing on and off; `settled`: whether an alignment interval decides the criterion
    (while it does not, bench doubles its pairs, up to SETTLE_FACTOR x steps and SETTLE_SECONDS). Not on an emulated chip,
    whose alignment is not judged."""
    from ..bench import bench

    extend = settled is not None and not target.emulated
    try:
        report = bench(target.spec, target.device, steps=steps, warmup=warmup, train=True,
                       settled=settled if extend else None,
                       max_steps=SETTLE_FACTOR * steps if extend else None, max_seconds=SETTLE_SECONDS)
    except Exception as exc:  # the N-step run itself crashing is a stability result, not a grade error
        found.bench = {"error": _first_lines(exc), "error_type": type(exc).__name__, "steps": steps}
        return
    found.bench, found.bench_report = report.data, report
