"""L0/L1/L2 grading of a model on a device, from measurements only.

The levels and thresholds are the article's (seed/torch-fl-article.zh.txt): section 4.2 defines L0 (the
model runs, operator coverage basically sufficient), L1 (common ops within 90% of the native path, mixed
precision) and L2 (distributed training, dynamic shapes, collectives, long-run stability); section 4.3
gives the numbers (native share >= 80%, alignment >= 0.9, 4-device scaling >= 3.2x, precision within
rtol/atol, 72 h without a crash and with flat memory).

Every criterion is PASS, FAIL or NOT MEASURED, with the number and the measurement behind it. The achieved
level is the highest one whose criteria, and those of every level below it, all PASS: a criterion that
was not measured never counts as passed. What grade cannot measure (multi-device scaling, a 72-hour
run; the distributed preflight without torch_fl.distributed or without two devices) stays NOT MEASURED
and says why.

An emulated chip (``emu:NAME``) runs on the CPU under a Python dispatch mode: coverage, whether the model
runs, and precision are properties of the description and meaningful there; speed is the emulation's,
so performance alignment is not measured on it.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..errors import UnsupportedOperatorError
from .bench import LEAK_MIN_SAMPLES, LEAK_RULE, NOISY
from .bench import TARGET as ALIGNMENT_TARGET
from .coverage import NATIVE_CALLS_WARNING
from .model import ModelSpec
from .report import Chart, Report, Section, Table, progress

LEVELS = ("L0", "L1", "L2")
PASS, FAIL, NOT_MEASURED = "PASS", "FAIL", "NOT MEASURED"
STATUSES = (PASS, FAIL, NOT_MEASURED)

NATIVE_SHARE_TARGET = NATIVE_CALLS_WARNING  # article 4.3: below 80% native is a warning sign
SCALING_TARGET = 3.2  # article 4.3: 4-device training speed-up
SCALING_DEVICES = 4
DEFAULT_STEPS = 30
DEFAULT_WARMUP = 3
PRECISION_DTYPE = "float32"
DISTRIBUTED_ISSUE = "issue 7"
PREFLIGHT_RANKS = 2
PREFLIGHT_STEP_S = 30.0  # each preflight step (exchange, each checked collective) may take this long
PREFLIGHT_TIMEOUT_S = 120.0  # the whole spawned job: two interpreters importing torch on a busy host
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Timeout\w*|Interrupt)\b.*:")
SOURCE = "seed/torch-fl-article.zh.txt: levels from section 4.2, thresholds from the metric table in 4.3"

LEVEL_TITLE = {"L0": "the model runs", "L1": "deployable", "L2": "production"}
LEVEL_MEANING = {
    "L0": "the model runs end to end; operator coverage basically sufficient; speed not required "
          "(article 4.2: functional validation, development bring-up)",
    "L1": "L0, plus common ops within 90% of the native path and mixed precision "
          "(article 4.2: common models deployable)",
    "L2": "L1, plus distributed training, dynamic shapes, collectives and long-run stability "
          "(article 4.2: production)",
}


@dataclass
class Criterion:
    id: str
    level: str
    name: str
    threshold: str
    measurement: str | None  # what produced the number: run, coverage, compare, bench; None: nothing
    status: str = NOT_MEASURED
    measured: Any = None  # a number where the threshold is numeric, else a short text; None: not measured
    evidence: str = ""

    def set(self, status: str, measured: Any, evidence: str) -> None:
        self.status, self.measured, self.evidence = status, measured, evidence

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "level": self.level, "name": self.name, "threshold": self.threshold,
                "measured": self.measured, "status": self.status, "measurement": self.measurement,
                "evidence": self.evidence}


@dataclass
class Target:
    """What is graded: the model, the device string, its description and where it runs."""

    spec: ModelSpec
    device: str
    reference: str
    desc: Any
    dev: torch.device
    emulated: bool


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


# Criteria ----------------------------------------------------------------------------------------------
def criteria(steps: int, precision: str) -> list[Criterion]:
    """Every criterion of every level, NOT MEASURED until a measurement sets it."""
    share = f">= {NATIVE_SHARE_TARGET:.0%} of calls native"
    return [
        Criterion("l0.train_step", "L0", "training step runs on the device",
                  "forward, loss, backward and an AdamW step complete with routing active; loss finite",
                  "run"),
        Criterion("l0.unsupported_ops", "L0", "no unsupported op", "0 unsupported (op, dtype) pairs in "
                  "the traced training step", "coverage"),
        Criterion("l1.native_share", "L1", "native share of calls", share, "coverage"),
        Criterion("l1.alignment", "L1", "performance alignment",
                  f">= {ALIGNMENT_TARGET} (routed steps/s / routing disabled)", "bench"),
        Criterion("l1.autocast", "L1", "mixed precision (autocast)",
                  "forward + backward under torch.fl.autocast with the description's dtype; loss finite",
                  "run"),
        Criterion("l1.precision", "L1", "precision vs reference", f"0 tensors outside {precision}",
                  "compare"),
        Criterion("l2.distributed", "L2", "distributed preflight", f"preflight passes on {PREFLIGHT_RANKS} "
                  "ranks (versions, descriptions, checked collectives)", "run"),
        Criterion("l2.scaling", "L2", f"{SCALING_DEVICES}-device scaling",
                  f">= {SCALING_TARGET}x speed-up on {SCALING_DEVICES} devices", None),
        Criterion("l2.dynamic_shapes", "L2", "dynamic shapes", "forward runs with a second input shape "
                  "(dim 0 of every input halved)", "run"),
        Criterion("l2.compile", "L2", "compile (JIT)", "torch.compile with compile.backend runs a "
                  "forward + backward; loss finite", "run"),
        Criterion("l2.memory", "L2", "memory flat over steps", f"no leak by the leak rule over {steps} "
                  "steps per mode (article: 72 h, no crash, flat memory)", "bench"),
    ]


def achieved_level(rows: list[Criterion]) -> tuple[str, str]:
    """The highest level whose criteria, and those of every level below, all PASS; and what stops the
    next one. NOT MEASURED is not PASS."""
    level = "none"
    for name in LEVELS:
        mine = [c for c in rows if c.level == name]
        if all(c.status == PASS for c in mine):
            level = name
            continue
        return level, f"{name} not reached: " + _shortfall(mine)
    return level, ""


def _shortfall(rows: list[Criterion]) -> str:
    parts = []
    for status, word in ((FAIL, "failed"), (NOT_MEASURED, "not measured")):
        names = [c.name for c in rows if c.status == status]
        if names:
            count = f"{len(names)} criterion" if len(names) == 1 else f"{len(names)} criteria"
            parts.append(f"{count} {word} ({', '.join(names)})")
    return "; ".join(parts)


def claim_check(claimed: str, level: str) -> tuple[bool | None, str]:
    """Whether the measured level reaches what the description claims (None: nothing claimed)."""
    if claimed == "none":
        return None, "the description claims no level (level = 'none')"
    reached = level != "none" and LEVELS.index(level) >= LEVELS.index(claimed)
    if reached:
        return True, f"confirmed for this model: claims {claimed}, measured {level}"
    return False, f"not confirmed for this model: claims {claimed}, measured {level}"


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
    from ..routing import activated

    return activated(target.device)


def _out_dtype(output: Any) -> str | None:
    floats = [t for t in _tensors(output) if t.is_floating_point()]
    return str(floats[0].dtype).removeprefix("torch.") if floats else None


def _loss_value(loss: torch.Tensor) -> float:
    return float(loss.detach().float().cpu())


def train_step(target: Target) -> Outcome:
    """Forward, loss, backward and an AdamW step on the device with routing active."""
    from .. import runtime

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
    from .. import runtime

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
    from .. import runtime

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
    from .. import runtime

    section = target.desc.section("compile")
    compiled: list[torch.nn.Module] = []

    def run() -> dict[str, Any]:
        model, inputs = _device_copy(target)
        model.train()
        # torch.fl.compile: the description's backend and dynamic-shape policy, through the cache.
        from ..compiler import compile as fl_compile

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


def _distributed_api() -> tuple[bool, str]:
    """Whether torch_fl.distributed offers init_process_group with its preflight; else why not."""
    missing = f"not available in this version: {DISTRIBUTED_ISSUE} (torch_fl.distributed with a preflight)"
    try:
        module = importlib.import_module("torch_fl.distributed")
    except ImportError:
        return False, missing
    except Exception as exc:  # a broken module must not stop the grade: it is this criterion's evidence
        return False, f"{missing}; importing torch_fl.distributed failed: {_first_lines(exc, 1)}"
    if not (hasattr(module, "init_process_group") and hasattr(module, "preflight")):
        return False, missing
    return True, ""


def plan_preflight(target: Target, requested: bool) -> PreflightPlan:
    from .. import runtime

    available, why = _distributed_api()
    if not available:
        return PreflightPlan(why=why)
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
    what = (f"torch.fl.distributed.init_process_group in {world} processes spawned on this host "
            f"({'all on the CPU' if device else 'acc0, acc1'}), whose preflight compares the ranks and runs "
            f"checked collectives")
    return PreflightPlan(world, device, what)


def preflight_rank(rank: int, world: int, init_file: str, device: str | None, out: str) -> None:
    """One rank of grade's preflight, in its own process (``python -c``)."""
    import torch.distributed as dist

    from .. import distributed

    # timeout=0: torch's own collective timeout and no watchdog thread; the preflight's steps still
    # time out (PREFLIGHT_STEP_S), and grade kills ranks that outlive PREFLIGHT_TIMEOUT_S.
    report = distributed.init_process_group(init_method=f"file://{init_file}", rank=rank, world_size=world,
                                            device=device, timeout=0, preflight=True,
                                            preflight_timeout=PREFLIGHT_STEP_S)
    try:
        if rank == 0:
            Path(out).write_text(json.dumps({"summary": report.summary(), "backend": report.backend,
                                             "world_size": report.world_size, "rows": report.rows},
                                            default=str), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def _rank_env(rank: int, world: int) -> dict[str, str]:
    # The ranks' own numbers, not a LOCAL_RANK inherited from a launcher that started grade itself.
    return {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world)}


def _last_error(stderr: str) -> str:
    """The exception line of a rank's traceback (and the two lines after it: multi-line messages)."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    hits = [i for i, line in enumerate(lines) if _EXCEPTION_LINE.match(line)]
    picked = lines[hits[-1]:hits[-1] + 3] if hits else lines[-3:]
    return " ".join(line.strip() for line in picked) or "exited without a message"


def _wait_ranks(procs: list[subprocess.Popen], logs: list[Path], world: int) -> None:
    """Wait for every rank; when one fails the others would wait for it until their timeouts, so they
    are killed at once. Raises with the failed rank's error, or TimeoutError for ranks still running at
    PREFLIGHT_TIMEOUT_S (also killed)."""
    deadline = time.monotonic() + PREFLIGHT_TIMEOUT_S
    while time.monotonic() < deadline:
        codes = [proc.poll() for proc in procs]
        if all(code is not None for code in codes) or any(code not in (None, 0) for code in codes):
            break
        time.sleep(0.05)
    running = [rank for rank, proc in enumerate(procs) if proc.poll() is None]
    for rank in running:
        procs[rank].kill()
        procs[rank].wait()
    failed = [rank for rank, proc in enumerate(procs) if rank not in running and proc.returncode]
    killed = f"; killed rank(s) {', '.join(map(str, running))}, left waiting for it" if running else ""
    if failed:
        rank = failed[0]
        raise RuntimeError(f"rank {rank} of {world} exited with status {procs[rank].returncode}: "
                           f"{_last_error(logs[rank].read_text(errors='replace'))}{killed}")
    if running:
        raise TimeoutError(f"rank(s) {', '.join(map(str, running))} of {world} did not finish within "
                           f"{PREFLIGHT_TIMEOUT_S:.0f} s (killed)")


def run_preflight(plan: PreflightPlan) -> Outcome:
    """The preflight in `plan.world` fresh processes, as a distributed job's first step would run it."""

    def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="torchfl-grade-") as tmp:
            out = Path(tmp, "report.json")
            logs = [Path(tmp, f"rank{r}.log") for r in range(plan.world)]
            procs = []
            for rank in range(plan.world):
                rendezvous = str(Path(tmp, "rendezvous"))
                code = ("from torch_fl.analysis.grade import preflight_rank; preflight_rank("
                        f"{rank}, {plan.world}, {rendezvous!r}, {plan.device!r}, {str(out)!r})")
                with logs[rank].open("w") as log:
                    procs.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                                                  stderr=log, env=_rank_env(rank, plan.world)))
            _wait_ranks(procs, logs, plan.world)
            return json.loads(out.read_text(encoding="utf-8"))
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


def _coverage_name(desc: Any, device: str, emulated: bool) -> str:
    from ..description import registry

    if emulated:
        return device
    return desc.name if desc.name in registry.descriptions() else desc.path


def measure_coverage(target: Target, found: Measurements) -> None:
    from .coverage import coverage

    report = coverage(target.spec, _coverage_name(target.desc, target.device, target.emulated), train=True)
    summary = report.data["summary"]
    found.coverage_report = report
    found.coverage = {**summary,
                      "unsupported": [{"op": op["op"], "dtype": op["dtype"], "calls": op["calls"],
                                       "modules": [m["module"] for m in op["modules"]]}
                                      # the model's own calls whose translation chain stops somewhere
                                      for op in report.data["ops"]
                                      if op["verdict"] == "unsupported" and not op["via"]],
                      "notes": report.data["notes"]}


def measure_compare(target: Target, found: Measurements) -> None:
    from .compare import CompareError, compare

    try:
        report = compare(target.spec, target.device, target.reference, dtype=PRECISION_DTYPE, train=True)
    except (UnsupportedOperatorError, CompareError) as exc:
        found.compare = {"error": _first_lines(exc), "error_type": type(exc).__name__}
        return
    found.compare, found.compare_report = report.data, report


def measure_bench(target: Target, found: Measurements, steps: int, warmup: int) -> None:
    from .bench import bench

    try:
        report = bench(target.spec, target.device, steps=steps, warmup=warmup, train=True)
    except Exception as exc:  # the N-step run itself crashing is a stability result, not a grade error
        found.bench = {"error": _first_lines(exc), "error_type": type(exc).__name__, "steps": steps}
        return
    found.bench, found.bench_report = report.data, report


# Judging: measurements -> criterion statuses -------------------------------------------------------------
def _by_id(rows: list[Criterion]) -> dict[str, Criterion]:
    return {c.id: c for c in rows}


def _error_evidence(outcome: Outcome) -> str:
    return f"raised {outcome.error_type}: {outcome.error}"


def judge_train_step(c: Criterion, target: Target, outcome: Outcome) -> None:
    where = f"{target.device} with routing active"
    if not outcome.ok:
        c.set(FAIL, f"raised {outcome.error_type}", f"training step on {where} {_error_evidence(outcome)}")
        return
    loss = outcome.detail["loss"]
    status = PASS if math.isfinite(loss) else FAIL
    c.set(status, f"ran, loss {loss:.6g}", f"forward, loss, backward and AdamW step on {where} in "
          f"{outcome.seconds:.2f} s; loss {loss:.6g}" + ("" if status == PASS else " is not finite"))


def judge_coverage(rows: dict[str, Criterion], target: Target, cov: dict[str, Any]) -> None:
    unsupported = cov["unsupported"]
    names = "; ".join(f"{u['op']} ({u['dtype'] or 'any dtype'}) called by {', '.join(u['modules'][:3])}"
                      for u in unsupported)
    rows["l0.unsupported_ops"].set(
        PASS if not unsupported else FAIL, len(unsupported),
        f"coverage --train (a traced training step, {cov['ops']} (op, dtype) pairs, {cov['calls']} calls): "
        + (f"unsupported on {target.desc.name}: {names}" if unsupported else "every op has a route"))
    share = cov["native_calls_share"]
    routes = ", ".join(f"{kind} {n}" for kind, n in cov["routes"].items() if n)
    rows["l1.native_share"].set(
        PASS if share >= NATIVE_SHARE_TARGET else FAIL, share,
        f"coverage --train: {cov['routes']['native']} of {cov['calls']} calls native ({share:.1%}); "
        f"calls per route: {routes or 'none'}")


def judge_autocast(c: Criterion, target: Target, outcome: Outcome) -> None:
    dtype = target.desc.autocast_dtype
    call = f"torch.fl.autocast({target.dev.type!r}, dtype={dtype}) (precision.autocast_dtype of " \
           f"'{target.desc.name}')"
    if not outcome.ok:
        c.set(FAIL, f"raised {outcome.error_type}", f"{call}: {_error_evidence(outcome)}")
        return
    loss = outcome.detail["loss"]
    status = PASS if math.isfinite(loss) else FAIL
    lists = (f"; emulated: the CPU's autocast op lists decided which ops ran in {dtype}, the chip's may "
             "differ") if target.emulated else ""
    c.set(status, f"loss {loss:.6g}", f"{call}: forward + loss under autocast, backward; loss {loss:.6g}"
          + (" (finite)" if status == PASS else " is NOT finite")
          + f", output {outcome.detail['output_dtype']}{lists}")


def judge_precision(c: Criterion, target: Target, cmp: dict[str, Any]) -> None:
    if "error" in cmp:
        status = FAIL if cmp["error_type"] == "UnsupportedOperatorError" else NOT_MEASURED
        c.set(status, None if status == NOT_MEASURED else f"raised {cmp['error_type']}",
              f"compare --train vs {target.reference}: {cmp['error_type']}: {cmp['error']}")
        return
    tensors = [*cmp["modules"], cmp["output"], *cmp.get("gradients", [])]
    outside = sum(not t["ok"] for t in tensors)
    tol, out = cmp["tolerance"], cmp["output"]
    same = (not target.emulated and target.dev.type == _reference_type(target.reference))
    c.set(PASS if cmp["ok"] else FAIL, outside,
          f"compare --train vs {target.reference} (routing off), {cmp['dtype']}, rtol {tol['rtol']:g} atol "
          f"{tol['atol']:g} ({tol['source']}): {len(cmp['modules'])} modules, the output and "
          f"{len(cmp.get('gradients', []))} gradients; {outside} outside tolerance; output max rel "
          f"{out['max_rel']:.3g}; first failure: {cmp['first_failure'] or 'none'}"
          + ("; same device type as the reference: this checks torch-fl's routes there, not another "
             "chip's kernels" if same else ""))


def _reference_type(reference: str) -> str:
    from ..device import resolve

    return resolve(reference).type


def judge_alignment(c: Criterion, target: Target, bench: dict[str, Any] | None) -> None:
    if bench is None:
        return
    if "error" in bench:
        c.set(FAIL, f"raised {bench['error_type']}", f"bench: the routed run stopped: {bench['error']}")
        return
    routed, native, ratio = bench["routed"], bench["native"], bench["alignment"]
    numbers = (f"routed {routed['steps_per_s']:.3g} vs routing disabled {native['steps_per_s']:.3g} "
               f"steps/s (median of {bench['steps']} training steps per mode)")
    if target.emulated:
        c.set(NOT_MEASURED, None,
              f"emulated chip: bench compares the emulation (the CPU plus a Python dispatch mode on every "
              f"aten call) with the plain CPU, so its ratio ({ratio:.3g} here: {numbers}) measures the "
              f"emulation, not {target.desc.name}; measure alignment on the device itself")
        return
    noisy = noisy_modes(bench)
    warning = f"; noisy ({', '.join(noisy)}: p90 > {NOISY}x median): rerun with more --steps" if noisy else ""
    c.set(PASS if ratio >= ALIGNMENT_TARGET else FAIL, ratio, f"bench: {numbers}{warning}")


def noisy_modes(bench: dict[str, Any] | None) -> list[str]:
    """bench's modes whose step times spread so much (p90 > NOISY x median) that the ratio is uncertain."""
    if not bench or "error" in bench:
        return []
    return [m for m in ("routed", "native")
            if bench[m]["latency_ms"]["p90"] > NOISY * bench[m]["latency_ms"]["median"]]


def judge_memory(c: Criterion, bench: dict[str, Any] | None) -> None:
    if bench is None:
        return
    if "error" in bench:
        c.set(FAIL, f"raised {bench['error_type']}",
              f"the {bench['steps']}-step run stopped: {bench['error']}")
        return
    memory = bench["memory"]
    samples = len(memory["samples"])
    if samples - samples // 2 < LEAK_MIN_SAMPLES:
        c.set(NOT_MEASURED, None, f"bench gave {samples} memory samples; the leak rule needs "
              f"{2 * LEAK_MIN_SAMPLES} (use --steps 4 or more)")
        return
    c.set(FAIL if memory["leak"] else PASS, "leak" if memory["leak"] else "flat",
          f"bench, {samples} samples (memory after every step, both modes): {memory['why']}; "
          f"{bench['steps']} steps per mode is a short proxy for the article's 72 h")


def judge_dynamic(c: Criterion, target: Target, halved: tuple | None, eager: Outcome | None,
                  compiled: Outcome | None) -> None:
    if halved is None:
        c.set(NOT_MEASURED, None, "some input tensor has no dim 0 of size >= 2 to halve, so grade cannot "
              "make a second shape")
        return
    before, after = _shapes(target.spec.inputs), _shapes(halved)
    policy = f"description compile.dynamic_shapes = '{target.desc.section('compile')['dynamic_shapes']}'"
    if not eager.ok:
        c.set(FAIL, f"raised {eager.error_type}", f"eager forward with inputs {before} -> {after} on "
              f"{target.device}: {_error_evidence(eager)}")
        return
    if compiled is not None and not compiled.ok:
        c.set(FAIL, f"compiled: raised {compiled.error_type}", f"eager forward with {after} ran; the "
              f"compiled model at {after}: {_error_evidence(compiled)} ({policy})")
        return
    how = ("ran eager and compiled" if compiled is not None else
           "ran eager; the compiled model at a second shape is measured with --compile")
    c.set(PASS, f"ran at {after}", f"forward on {target.device} with inputs halved along dim 0, {before} "
          f"-> {after}: {how}; {policy}")


def judge_compile(c: Criterion, target: Target, requested: bool, outcome: Outcome | None,
                  eager: Outcome | None) -> None:
    section = target.desc.section("compile")
    if not section["jit"]:
        c.set(NOT_MEASURED, None, f"the device description disables JIT (compile.jit = false in "
              f"'{target.desc.name}')")
    elif target.emulated:
        c.set(NOT_MEASURED, None, f"emulated chip: torch.compile here would generate CPU code with "
              f"'{section['backend']}', which says nothing about {target.desc.name}'s compiler")
    elif not requested:
        c.set(NOT_MEASURED, None, "not requested: a cold torch.compile takes tens of seconds (25.7 s "
              "measured for examples/gpt.py at 2 x 16 tokens on a shared 2-core CPU); pass --compile to "
              "measure it")
    elif outcome is None:
        c.set(NOT_MEASURED, None, "skipped: the eager training step failed (L0)")
    elif not outcome.ok:
        c.set(FAIL, f"raised {outcome.error_type}", f"torch.compile(backend={section['backend']!r}): "
              f"{_error_evidence(outcome)}")
    else:
        loss = outcome.detail["loss"]
        ref = f"; eager loss {eager.detail['loss']:.6g}" if eager is not None and eager.ok else ""
        c.set(PASS if math.isfinite(loss) else FAIL, f"ran, loss {loss:.6g}",
              f"torch.compile(backend={section['backend']!r}) forward + loss + backward on {target.device}: "
              f"{outcome.seconds:.1f} s including compilation; loss {loss:.6g}{ref}")


def judge_distributed(rows: dict[str, Criterion], target: Target, plan: PreflightPlan,
                      outcome: Outcome | None) -> None:
    c = rows["l2.distributed"]
    if outcome is None:
        c.set(NOT_MEASURED, None, plan.why)
    elif not outcome.ok:
        c.set(FAIL, f"raised {outcome.error_type}", f"{plan.what}: {_error_evidence(outcome)}")
    else:
        c.set(PASS, f"{outcome.detail['world_size']} ranks passed",
              f"{plan.what}: {outcome.detail['summary']}; a short check of this host's devices, not a "
              f"multi-node job")
    rows["l2.scaling"].set(NOT_MEASURED, None, f"needs a distributed training run on {SCALING_DEVICES} "
                           "devices timed against one device; grade does not run one")


def _skip(rows: dict[str, Criterion], ids: tuple[str, ...], why: str) -> None:
    for key in ids:
        rows[key].set(NOT_MEASURED, None, why)


# The grade ---------------------------------------------------------------------------------------------
def _target(spec: ModelSpec, device: str, reference: str) -> Target:
    from ..device import resolve_spec

    resolved = resolve_spec(device)  # activates nothing: each run sets its own routing
    resolve_spec(reference)  # a bad reference is a usage error before minutes of measuring
    return Target(spec, device, reference, resolved.description, resolved.device, resolved.emulated)


def grade(spec: ModelSpec, device: str, reference: str = "cpu", *, steps: int = DEFAULT_STEPS,
          warmup: int = DEFAULT_WARMUP, compile: bool = False, preflight: bool = True) -> Report:
    """Grade `spec` on `device`: L0/L1/L2 from coverage, real runs, compare and bench.

    Args:
        spec: the model (``torch_fl.analysis.model.load_model``).
        device: acc0, cuda:1, cpu or emu:NAME.
        reference: the device compare runs the reference on (routing off).
        steps: timed training steps per mode for bench (alignment and the memory run).
        warmup: untimed bench steps per mode.
        compile: measure torch.compile (tens of seconds); otherwise that criterion is NOT MEASURED.
        preflight: run torch.fl.distributed's preflight in two spawned processes (seconds), where this
            version has it and the device allows it.

    Returns:
        A Report whose ``data`` is the documented JSON (docs/analysis.md, "torchfl grade").

    Example:
        >>> from torch_fl.analysis.model import load_model
        >>> report = grade(load_model("examples/gpt.py:factory"), "emu:minimal", steps=4)  # doctest: +SKIP
        >>> report.data["level"]  # doctest: +SKIP
        'L0'
    """
    from .compare import dtype_tolerance

    target = _target(spec, device, reference)
    tol = dtype_tolerance(PRECISION_DTYPE, target.desc)
    rows = criteria(steps, f"rtol {tol.rtol:g} / atol {tol.atol:g} ({PRECISION_DTYPE})")
    found = Measurements()
    _measure(target, rows, found, steps=steps, warmup=warmup, compile=compile, preflight=preflight)
    return build_report(target, rows, found, steps=steps, tol=tol)


def _measure(target: Target, rows: list[Criterion], found: Measurements, *, steps: int, warmup: int,
             compile: bool, preflight: bool) -> None:
    by_id = _by_id(rows)
    compile = compile and _can_compile(target)
    plan = plan_preflight(target, preflight)
    step = _progress_counter(6 + compile + bool(plan.world))
    if plan.world:  # first: it does not need the model, and a broken setup shows before minutes of runs
        step(f"distributed preflight: {plan.world} processes through torch.fl.distributed")
        outcome = run_preflight(plan)
        found.runs["preflight"] = outcome.data()
        judge_distributed(by_id, target, plan, outcome)
    else:
        judge_distributed(by_id, target, plan, None)
    step("coverage: tracing a training step")
    measure_coverage(target, found)
    judge_coverage(by_id, target, found.coverage)
    step(f"L0: a real training step on {target.device}")
    eager = train_step(target)
    found.runs["train_step"] = eager.data()
    judge_train_step(by_id["l0.train_step"], target, eager)
    if not eager.ok:
        _skip(by_id, ("l1.alignment", "l1.autocast", "l1.precision", "l2.dynamic_shapes", "l2.memory"),
              f"skipped: the training step failed on {target.device} (L0), so this run would stop there too")
        judge_compile(by_id["l2.compile"], target, compile, None, eager)
        return
    _measure_running(target, by_id, found, eager, step, steps=steps, warmup=warmup, compile=compile)


def _measure_running(target: Target, by_id: dict[str, Criterion], found: Measurements, eager: Outcome,
                     step: Callable[[str], None], *, steps: int, warmup: int, compile: bool) -> None:
    """The measurements that need the model to run on the device."""
    step(f"precision: compare --train against {target.reference}")
    measure_compare(target, found)
    judge_precision(by_id["l1.precision"], target, found.compare)
    step(f"mixed precision: a step under autocast({target.desc.autocast_dtype})")
    amp = autocast_step(target)
    found.runs["autocast"] = amp.data()
    judge_autocast(by_id["l1.autocast"], target, amp)
    compiled_outcome, compiled_model = None, None
    if compile:
        step(f"compile: torch.compile(backend={target.desc.section('compile')['backend']!r}), "
             "cold compilation takes a while")
        compiled_outcome, compiled_model = compile_step(target)
        found.runs["compile"] = compiled_outcome.data()
    judge_compile(by_id["l2.compile"], target, compile, compiled_outcome, eager)
    step("dynamic shapes: a forward pass with dim 0 of every input halved")
    _measure_dynamic(target, by_id["l2.dynamic_shapes"], found, compiled_model)
    step(f"bench: {steps} training steps per mode, routing on and off (alignment, memory)")
    measure_bench(target, found, steps, warmup)
    judge_alignment(by_id["l1.alignment"], target, found.bench)
    judge_memory(by_id["l2.memory"], found.bench)


def _measure_dynamic(target: Target, c: Criterion, found: Measurements,
                     compiled_model: torch.nn.Module | None) -> None:
    halved = halved_inputs(target.spec.inputs)
    eager = forward_at(target, halved) if halved is not None else None
    compiled = None
    if halved is not None and compiled_model is not None:  # not truthiness: Module.__len__ may not exist
        compiled = forward_at(target, halved, compiled_model)
    found.runs["dynamic_shapes"] = {"eager": eager.data() if eager else None,
                                    "compiled": compiled.data() if compiled else None}
    judge_dynamic(c, target, halved, eager, compiled)


def _can_compile(target: Target) -> bool:
    """Whether a compile measurement means anything: JIT enabled, and a real device (an emulated chip
    would compile CPU code)."""
    return target.desc.section("compile")["jit"] and not target.emulated


def _progress_counter(total: int) -> Callable[[str], None]:
    count = 0

    def step(message: str) -> None:
        nonlocal count
        count += 1
        progress(f"grade [{count}/{total}] {message}")
    return step


# Report ------------------------------------------------------------------------------------------------
def thresholds(steps: int, tol: Any) -> dict[str, Any]:
    return {
        "native_calls_share": NATIVE_SHARE_TARGET,
        "alignment": ALIGNMENT_TARGET,
        "scaling": {"devices": SCALING_DEVICES, "speedup": SCALING_TARGET},
        "precision": {"dtype": PRECISION_DTYPE, "rtol": tol.rtol, "atol": tol.atol, "source": tol.source},
        "memory": {"steps": steps, "rule": LEAK_RULE},
        "source": SOURCE,
    }


def build_report(target: Target, rows: list[Criterion], found: Measurements, *, steps: int,
                 tol: Any) -> Report:
    level, why = achieved_level(rows)
    claimed = target.desc.data["level"]
    confirmed, claim_text = claim_check(claimed, level)
    section = target.desc.section("compile")
    data: dict[str, Any] = {
        "model": target.spec.name, "device": target.device, "reference": target.reference,
        "description": {"name": target.desc.name, "path": target.desc.path, "emulated": target.emulated,
                        "autocast_dtype": target.desc.autocast_dtype,
                        "compile": {k: section[k] for k in ("jit", "backend", "dynamic_shapes")}},
        "claimed_level": claimed, "level": level, "level_reason": why, "claim_confirmed": confirmed,
        "criteria": [c.row() for c in rows],
        "thresholds": thresholds(steps, tol),
        "measurements": found.data(),
    }
    return _render(data, target, found, claim_text)


def _device_text(target: Target) -> str:
    if target.emulated:
        return (f"{target.device}: emulated on the CPU (a Python dispatch mode enforces description "
                f"'{target.desc.name}')")
    return f"{target.device} ({target.dev}, description '{target.desc.name}')"


def _level_text(data: dict[str, Any]) -> str:
    return data["level"] + (f" ({data['level_reason']})" if data["level_reason"] else "")


def _render(data: dict[str, Any], target: Target, found: Measurements, claim_text: str) -> Report:
    rows = data["criteria"]
    counts = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
    summary = [
        ("model", data["model"]),
        ("device", _device_text(target)),
        ("reference", f"{data['reference']} (precision only)"),
        ("level", _level_text(data)),
        ("claimed", f"{data['claimed_level']} (level in description '{target.desc.name}'): {claim_text}"),
        ("criteria", f"{counts[PASS]} PASS, {counts[FAIL]} FAIL, {counts[NOT_MEASURED]} NOT MEASURED "
                     "(NOT MEASURED never counts as PASS)"),
        ("thresholds", _thresholds_text(data["thresholds"])),
    ]
    sections = [_level_section(name, rows) for name in LEVELS]
    sections.append(Section("Evidence", text=[f"- [{r['status']}] {r['level']} {r['name']}: {r['evidence']}"
                                              for r in rows]))
    sections += _measurement_sections(found)
    return Report(f"torchfl grade: {data['model']} on {data['device']}", data, summary, sections,
                  _warnings(data, target, counts))


def _thresholds_text(t: dict[str, Any]) -> str:
    p = t["precision"]
    return (f"native calls >= {t['native_calls_share']:.0%}, alignment >= {t['alignment']}, "
            f"{t['scaling']['devices']}-device scaling >= {t['scaling']['speedup']}x, precision "
            f"{p['dtype']} rtol {p['rtol']:g} atol {p['atol']:g}, memory flat over {t['memory']['steps']} "
            f"steps (article sections 4.2 and 4.3)")


def _level_section(name: str, rows: list[dict[str, Any]]) -> Section:
    mine = [r for r in rows if r["level"] == name]
    table = Table(["criterion", "threshold", "measured", "status", "evidence"],
                  [[r["name"], r["threshold"], _measured_cell(r["measured"]), r["status"], r["evidence"]]
                   for r in mine])
    return Section(f"{name}: {LEVEL_TITLE[name]}", text=[f"{name}: {LEVEL_MEANING[name]}."],
                   tables=[table])


def _measured_cell(value: Any) -> Any:
    if value is None:
        return "-"
    if isinstance(value, float) and 0 <= value <= 1:
        return f"{value:.3f}"
    return value


def _chart(report: Report | None, kind: str, title: str) -> list[Chart]:
    if report is None:
        return []
    return [c for s in report.sections for c in s.charts if c.kind == kind and c.title == title]


def _measurement_sections(found: Measurements) -> list[Section]:
    sections = []
    if found.coverage is not None:
        routes = found.coverage["routes"]
        bar = Chart("bar", "Calls per route (coverage --train)", list(routes),
                    [{"name": "calls", "values": list(routes.values())}], x_label="route", y_label="calls")
        ops = found.coverage_report.sections[0]  # coverage's "Ops that are not native" section
        sections.append(Section("Routes (coverage --train)", text=[ops.title + ":", *ops.text],
                                tables=ops.tables, charts=[
            bar, *_chart(found.coverage_report, "stacked-bar", "Calls per route, by top-level module")]))
    if found.compare_report is not None:
        sections.append(Section("Precision per module (compare --train)", text=[
            f"{k}: {v}" for k, v in found.compare_report.summary[4:]],
            charts=_chart(found.compare_report, "line", "Max relative error per module")))
    if found.bench_report is not None:
        # Only bench's memory rows: its alignment row would repeat an emulation's misleading ratio.
        sections.append(Section("Memory over steps (bench)", text=[
            f"{k}: {v}" for k, v in found.bench_report.summary if k in ("peak memory", "memory leak")],
            charts=_chart(found.bench_report, "line", "Memory after each step")))
    return sections


def _not_measured_warning(data: dict[str, Any], counts: dict[str, int]) -> list[str]:
    if not counts[NOT_MEASURED]:
        return []
    text = f"{counts[NOT_MEASURED]} criteria were not measured; NOT MEASURED never counts as PASS"
    reached = LEVELS.index(data["level"]) if data["level"] in LEVELS else -1
    nxt = LEVELS[reached + 1] if reached + 1 < len(LEVELS) else None
    blocking = [r for r in data["criteria"] if r["level"] == nxt and r["status"] != PASS]
    if blocking and all(r["status"] == NOT_MEASURED for r in blocking):
        text += f", and only unmeasured criteria stand between this model and {nxt}: {data['level']} is a " \
                "lower bound"
    return [text]


def _warnings(data: dict[str, Any], target: Target, counts: dict[str, int]) -> list[str]:
    warnings = []
    if target.emulated:
        warnings.append(f"{target.device} is an emulated chip: performance alignment there would measure "
                        "the emulation (CPU + Python dispatch), not the chip, so it is NOT MEASURED and L1 "
                        "cannot be reached; coverage, L0 and precision are meaningful")
    warnings += _not_measured_warning(data, counts)
    if data["claim_confirmed"] is False:
        warnings.append(f"the description claims {data['claimed_level']}; this model measured "
                        f"{data['level']}")
    alignment = next(r for r in data["criteria"] if r["id"] == "l1.alignment")
    if alignment["measured"] is not None and noisy_modes(data["measurements"]["bench"]):
        warnings.append(f"the alignment ({alignment['measured']:.3g}) comes from noisy step times (p90 > "
                        f"{NOISY}x median): its {alignment['status']} and the level can change on a rerun; "
                        f"use more --steps on a quieter machine")
    failed = [r for r in data["criteria"] if r["status"] == FAIL]
    if failed:
        warnings.append("failed: " + "; ".join(f"{r['level']} {r['name']}" for r in failed))
    return warnings
