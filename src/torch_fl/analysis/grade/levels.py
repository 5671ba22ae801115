"""grade's levels and criteria: each criterion with its threshold, how a measurement is judged, and
the level a set of judged criteria reaches.

Every criterion is PASS, FAIL, INCONCLUSIVE or NOT MEASURED, with the number and the measurement behind
it. The achieved level is the highest one whose criteria, and those of every level below it, all PASS: a
criterion that was not measured, or whose measurement could not decide, never counts as passed.

INCONCLUSIVE is for a noisy measurement (performance alignment): its confidence interval contains the
threshold, or load made it unmeasurable (bench's timing thread waited for a core more than LOAD_LIMIT of
the time), so PASS or FAIL would be decided by the machine's load, not by the model; the evidence names
the command that settles it, and the level line says it rests on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...report import INCONCLUSIVE, VERDICTS
from ..bench import CONFIDENCE, LEAK_MIN_SAMPLES, MIN_PAIRS, MIN_ROUNDS, NOISY, load_text
from ..bench import TARGET as ALIGNMENT_TARGET
from ..coverage import NATIVE_CALLS_WARNING
from .runs import PREFLIGHT_RANKS, Outcome, PreflightPlan, Target, _shapes

LEVELS = ("L0", "L1", "L2")
PASS, FAIL, NOT_MEASURED = VERDICTS
STATUSES = (PASS, FAIL, INCONCLUSIVE, NOT_MEASURED)

NATIVE_SHARE_TARGET = NATIVE_CALLS_WARNING  # below 80% of calls native is a warning sign
SCALING_TARGET = 3.2  # 4-device training speed-up (80% efficiency)
SCALING_DEVICES = 4
SOURCE = "torch-fl's adaptation levels and metric thresholds: `torchfl docs analysis`, 'torchfl grade'"

LEVEL_TITLE = {"L0": "the model runs", "L1": "deployable", "L2": "production"}
LEVEL_MEANING = {
    "L0": "the model runs end to end; operator coverage basically sufficient; speed not required "
          "(functional validation, development bring-up)",
    "L1": "L0, plus common ops within 90% of the native path and mixed precision "
          "(common models deployable)",
    "L2": "L1, plus distributed training, dynamic shapes, collectives and long-run stability "
          "(production)",
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
                  f">= {ALIGNMENT_TARGET} (routed steps/s / routing disabled; the {CONFIDENCE:.0%} interval "
                  "of the paired runs decides)", "bench"),
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
                  "steps per mode (production: 72 h, no crash, flat memory)", "bench"),
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
    for status, word in ((FAIL, "failed"), (INCONCLUSIVE, "inconclusive"), (NOT_MEASURED, "not measured")):
        names = [c.name for c in rows if c.status == status]
        if names:
            count = f"{len(names)} criterion" if len(names) == 1 else f"{len(names)} criteria"
            parts.append(f"{count} {word} ({', '.join(names)})")
    return "; ".join(parts)


def claim_check(claimed: str, level: str, rows: list[Criterion] | None = None) -> tuple[bool | None, str]:
    """Whether the measured level reaches what the description claims (None: nothing claimed, or the
    claim cannot be decided here: every criterion between the measured level and the claim that did not
    pass was NOT MEASURED or INCONCLUSIVE, so the measured level is a lower bound, not a refutation; an emulated chip
    cannot measure L1's alignment)."""
    if claimed == "none":
        return None, "the description claims no level (level = 'none')"
    reached = level != "none" and LEVELS.index(level) >= LEVELS.index(claimed)
    if reached:
        return True, f"confirmed for this model: claims {claimed}, measured {level}"
    start = LEVELS.index(level) + 1 if level != "none" else 0
    between = [c for c in rows or () if c.level in LEVELS[start:LEVELS.index(claimed) + 1]]
    short = [c for c in between if c.status != PASS]
    if short and all(c.status in (NOT_MEASURED, INCONCLUSIVE) for c in short):
        return None, (f"not decided here: claims {claimed}; {level} measured is a lower bound, since "
                      f"{_shortfall(short)} (nothing failed)")
    return False, f"not confirmed for this model: claims {claimed}, measured {level}"


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
    same = not target.emulated and target.dev.type == target.reference_type
    c.set(PASS if cmp["ok"] else FAIL, outside,
          f"compare --train vs {target.reference} (routing off), {cmp['dtype']}, rtol {tol['rtol']:g} atol "
          f"{tol['atol']:g} ({tol['source']}): {len(cmp['modules'])} modules, the output and "
          f"{len(cmp.get('gradients', []))} gradients; {outside} outside tolerance; output max rel "
          f"{out['max_rel']:.3g}; first failure: {cmp['first_failure'] or 'none'}"
          + ("; same device type as the reference: this checks torch-fl's routes there, not another "
             "chip's kernels" if same else ""))


def decide(low: float | None, high: float | None, threshold: float) -> str:
    """The decision rule of a noisy criterion (higher is better): PASS when the whole confidence interval
    [low, high] is at or above `threshold`, FAIL when it is wholly below, INCONCLUSIVE when it contains
    the threshold or there is no interval (too few samples)."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    if low >= threshold:
        return PASS
    if high < threshold:
        return FAIL
    return INCONCLUSIVE


def steps_to_settle(pairs: int, estimate: float, low: float | None, high: float | None,
                    threshold: float) -> int:
    """--steps that would likely make an interval like this one clear `threshold`: the interval's width
    shrinks as 1/sqrt(pairs), and it must shrink to the estimate's distance from the threshold."""
    if low is None or high is None or pairs < MIN_PAIRS:
        return max(2 * MIN_PAIRS, 2 * pairs, 30)
    half = (high - low) / 2
    gap = max(abs(estimate - threshold), 0.01 * threshold)
    need = math.ceil(pairs * (half / gap) ** 2 * 1.5)
    return int(min(max(need, 2 * pairs), 20 * pairs, 2000) + 9) // 10 * 10


def settle_command(target: Target, steps: int) -> str:
    return f"torchfl grade {target.spec.name} --device {target.device} --steps {steps}"


def judge_alignment(c: Criterion, target: Target, bench: dict[str, Any] | None) -> None:
    if bench is None:
        return
    if "error" in bench:
        c.set(FAIL, f"raised {bench['error_type']}", f"bench: the routed run stopped: {bench['error']}")
        return
    routed, native, ratio = bench["routed"], bench["native"], bench["alignment"]
    interval = bench["alignment_interval"]
    # the steps/s are each mode's median over all its steps; the alignment pairs neighbouring steps, so
    # the two figures' quotient is another statistic, and the text says which is which (issue 42)
    numbers = (f"per-mode median steps: routed {routed['steps_per_s']:.3g}, routing disabled "
               f"{native['steps_per_s']:.3g} steps/s over {bench['steps']} training steps each (their quotient "
               f"{routed['steps_per_s'] / native['steps_per_s']:.3f} is not the paired alignment)")
    if target.emulated:
        c.set(NOT_MEASURED, None,
              f"emulated chip: bench compares the emulation (the CPU plus a Python dispatch mode on every "
              f"aten call) with the plain CPU, so its ratio ({ratio:.3g} here; {numbers}) measures the "
              f"emulation, not {target.desc.name}; measure alignment on the device itself")
        return
    low, high, pairs, rounds = interval["low"], interval["high"], interval["pairs"], interval["rounds"]
    load = bench.get("load") or {}
    status = INCONCLUSIVE if load.get("loaded") else decide(low, high, ALIGNMENT_TARGET)
    if low is None:
        spread = (f"{pairs} interleaved pairs in {rounds} rounds give no {CONFIDENCE:.0%} interval (it needs "
                  f"{MIN_PAIRS} or more in {MIN_ROUNDS} or more rounds)")
    else:
        spread = (f"{CONFIDENCE:.0%} interval {low:.3f}-{high:.3f} from {pairs} interleaved pairs in {rounds} "
                  f"rounds (routed and native blocks alternating in one process; a sign-test interval over "
                  f"the rounds)")
    text = (f"bench: alignment {ratio:.3f} (the median over rounds of each round's median pair ratio), "
            f"{spread}; {numbers}")
    if load.get("loaded"):
        text += (f"; INCONCLUSIVE: load made it unmeasurable: {load_text(load)}. Rerun "
                 f"`{settle_command(target, bench['steps'])}` on a quieter machine (more steps do not help)")
    elif status == INCONCLUSIVE:
        steps = steps_to_settle(pairs, ratio, low, high, ALIGNMENT_TARGET)
        where = ("the interval contains the threshold " + f"{ALIGNMENT_TARGET}, so machine noise, not the "
                 "model, would decide PASS or FAIL" if low is not None else "too few steps to judge")
        text += (f"; INCONCLUSIVE: {where}. Settle it with `{settle_command(target, steps)}`, "
                 "on a quieter machine if you can")
    elif noisy_modes(bench):
        text += (f"; step times were noisy (p90 > {NOISY}x median) but the interval is clear of "
                 f"{ALIGNMENT_TARGET}, so the verdict holds")
    c.set(status, ratio, text)


def unmeasurable(bench: dict[str, Any] | None) -> bool:
    """Whether load made bench's alignment unmeasurable (grade: INCONCLUSIVE whatever the interval)."""
    return bool(bench and (bench.get("load") or {}).get("loaded"))


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
          f"{bench['steps']} steps per mode is a short proxy for a 72 h run")


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
