"""L0/L1/L2 grading of a model on a device, from measurements only.

The levels: L0, the model runs (operator coverage basically sufficient); L1, deployable (common ops within
90% of the native path, mixed precision); L2, production (distributed training, dynamic shapes,
collectives, long-run stability). The thresholds: native share >= 80%, alignment >= 0.9, 4-device scaling
>= 3.2x, precision within rtol/atol, flat memory over a long run. docs/analysis.md ("torchfl grade") has
the table and the JSON schema.

Every criterion is PASS, FAIL, INCONCLUSIVE or NOT MEASURED, with the number and the measurement behind
it; INCONCLUSIVE and NOT MEASURED never count as PASS. Performance alignment is judged by the confidence
interval of interleaved paired runs: when the interval contains the threshold, or the machine was so
loaded that other processes decided the step times, it is INCONCLUSIVE, with the command that settles it,
rather than a PASS or FAIL decided by the machine's load. What grade cannot measure (multi-device scaling, a 72-hour run; the
distributed preflight without two devices) stays NOT MEASURED and says why.

An emulated chip (``emu:NAME``) runs on the CPU: coverage, whether the model runs, and precision are
properties of the description and meaningful there; speed is the emulation's, so performance alignment
is not measured on it.

The package: levels.py (the levels, their criteria, judging), runs.py (the measurements), report.py (the
report); this module runs them in order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...report import Report, progress
from ..bench import TARGET as ALIGNMENT_TARGET
from ..model import ModelSpec
from .levels import (
    FAIL,
    INCONCLUSIVE,
    LEVELS,
    NOT_MEASURED,
    PASS,
    STATUSES,
    Criterion,
    _by_id,
    _skip,
    achieved_level,
    claim_check,
    criteria,
    decide,
    judge_alignment,
    judge_autocast,
    judge_compile,
    judge_coverage,
    judge_distributed,
    judge_dynamic,
    judge_memory,
    judge_precision,
    judge_train_step,
    noisy_modes,
)
from .presentation import build_report
from .runs import (
    PRECISION_DTYPE,
    Measurements,
    Outcome,
    Target,
    autocast_step,
    compile_step,
    forward_at,
    halved_inputs,
    measure_bench,
    measure_compare,
    measure_coverage,
    plan_preflight,
    run_preflight,
    train_step,
)

__all__ = ["DEFAULT_STEPS", "DEFAULT_WARMUP", "FAIL", "INCONCLUSIVE", "LEVELS", "NOT_MEASURED", "PASS", "STATUSES",
           "achieved_level", "claim_check", "criteria", "decide", "grade", "halved_inputs", "noisy_modes"]

DEFAULT_STEPS = 30
DEFAULT_WARMUP = 3


def _target(spec: ModelSpec, device: str, reference: str) -> Target:
    from ...device import resolve_spec

    resolved = resolve_spec(device)  # activates nothing: each run sets its own routing
    # resolved before minutes of measuring: a bad reference is a usage error now
    return Target(spec, device, reference, resolved, resolve_spec(reference).device.type)


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
    from ..compare import dtype_tolerance

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
    measure_bench(target, found, steps, warmup,
                  settled=lambda i: decide(i["low"], i["high"], ALIGNMENT_TARGET) != INCONCLUSIVE)
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
