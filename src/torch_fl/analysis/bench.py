"""Performance alignment: a model's steps on a device with torch-fl routing active vs the same device
with routing disabled, plus where routed time goes and whether memory grows.

The two modes run in interleaved blocks (routed, native, native, routed, ...) on one model, so machine
noise (other processes, frequency scaling, thermal drift) lands on both. Each step is timed on its own,
between device synchronisations; switching routing on and off between blocks, and the settling steps
after each switch, are not timed. Settling lasts at least SETTLE_STEPS steps and SETTLE_SECONDS: a
switch rewrites the dispatch tables of every operator (installing or removing a backend fallback,
~5-10 ms on the CPU key) and the first steps after it run on cold caches, longer on a loaded machine;
timed, they made a model whose every op is native measure 0.74 once (issue 31). For an emulated chip
(``emu:NAME``) "routing disabled" is the plain CPU run.

The alignment is paired: step i of a routed block and step i of the native block next to it (same
process, one block apart) form one pair, whose ratio native / routed step time is one sample; a round is
such a routed and native block side by side, and its ratio the median of its pairs'. The estimate is the
median of the rounds' ratios and its interval the sign test's for that median: the pairs of one round
share the load of their moment, so the rounds, not the pairs, are the independent evidence, and an
order-statistic interval keeps its stated coverage under load where a bootstrap of a few rounds did not
(the simulation in tests/analysis/test_grade.py). A descheduled step or a burst of load widens the
interval instead of moving it.

Load itself is measured: the time the timing thread waited for a core while runnable (Linux schedstat).
When it waited more than LOAD_LIMIT of the timed steps' wall time, other processes decided the step
times, and neither bench nor grade gives the alignment a verdict (grade: INCONCLUSIVE, the level says
so). grade judges the interval, not the point (`torchfl docs analysis`, "torchfl grade").
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map

from .._names import RouteKind
from ..report import Chart, Report, Section, Stage, Table, progress, stage
from .host_syncs import locate, syncs_data, syncs_line, syncs_section
from .model import ModelSpec

MODES = ("routed", "native")
TARGET = 0.9  # the native alignment ratio the article asks of an adaptation layer
MIB = 1 << 20
NOISY = 1.5  # p90 / median latency above which a measurement is flagged as noisy
CONFIDENCE = 0.95  # of the alignment's interval
MIN_PAIRS = 8  # fewer pairs give no interval ...
MIN_ROUNDS = 6  # ... nor fewer rounds (a 95% sign-test interval needs 6 samples)
SETTLE_STEPS = 2  # untimed steps after each switch of routing, at least ...
SETTLE_SECONDS = 0.02  # ... and for at least this long (a 1 ms step settles for 20 steps)
SETTLE_MAX_STEPS = 50  # (a bound for models of microsecond steps)
# Above this share of the timed steps' wall time spent waiting for a core, load, not routing, decides the
# step times: on this project's 2-core machine with two busy loops the timing thread waited 40-90% of it
# (and the alignment's rounds spread 0.4-2.4 for a model whose every op is native); an idle machine waits
# a few percent at most.
LOAD_LIMIT = 0.25
SCHEDSTAT = "/proc/thread-self/schedstat"  # Linux: ns on a core, ns waiting for one while runnable, slices

# Leak rule thresholds (docs/analysis.md explains them).
LEAK_MIN_SAMPLES = 6            # samples in the second half, below that there is no verdict
LEAK_REL_SLOPE = 1e-4           # slope > 0.01 % of the mean memory per step (+10 % in 1000 steps) ...
LEAK_MIN_GROWTH = 4 * MIB       # ... and the second half grew by more than 4 MiB ...
LEAK_RISING_SHARE = 1 / 3       # ... rising in at least a third of its steps (each by more than 64 KiB)
LEAK_STEP_NOISE = 64 << 10
LEAK_RULE = (f"over the second half of the run's samples (at least {LEAK_MIN_SAMPLES}): least-squares "
             f"slope > {LEAK_REL_SLOPE:.2%} of their mean per step, last - first > "
             f"{LEAK_MIN_GROWTH // MIB} MiB, and memory rose (by > {LEAK_STEP_NOISE >> 10} KiB) in at "
             f"least a third of the steps")


# Memory --------------------------------------------------------------------------------------------
def slope(samples: list[float]) -> float:
    """Least-squares slope of samples over their index (units per step); 0 for fewer than 2."""
    n = len(samples)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, statistics.fmean(samples)
    var = sum((i - mean_x) ** 2 for i in range(n))
    return sum((i - mean_x) * (y - mean_y) for i, y in enumerate(samples)) / var


@dataclass
class LeakVerdict:
    leak: bool
    slope: float  # bytes per step over the second half
    growth: float  # last - first of the second half
    why: str


def detect_leak(samples: list[float]) -> LeakVerdict:
    """Whether a memory series grows steadily (a leak) rather than settling (allocator warm-up, caches).

    Only the second half counts: the first half of a run still fills caches and optimizer state. A
    steady rise is required, so a single jump (an allocator growing its pool once) is not a leak."""
    half = samples[len(samples) // 2:]
    if len(half) < LEAK_MIN_SAMPLES:
        return LeakVerdict(False, 0.0, 0.0, f"too few steps for a verdict (need {2 * LEAK_MIN_SAMPLES})")
    rate = slope(half)
    growth = half[-1] - half[0]
    rising = sum(b - a > LEAK_STEP_NOISE for a, b in itertools.pairwise(half)) / (len(half) - 1)
    mean = statistics.fmean(half)
    checks = [(rate > LEAK_REL_SLOPE * mean, f"slope {rate / MIB:.3g} MiB/step vs {LEAK_REL_SLOPE:.2%} of "
               f"{mean / MIB:.0f} MiB"),
              (growth > LEAK_MIN_GROWTH, f"growth {growth / MIB:.3g} MiB"),
              (rising >= LEAK_RISING_SHARE, f"rose in {rising:.0%} of steps")]
    leak = all(ok for ok, _ in checks)
    return LeakVerdict(leak, rate, growth, "; ".join(text for _, text in checks))


# Timing --------------------------------------------------------------------------------------------
def waited_seconds() -> float | None:
    """Seconds the calling thread has waited for a core while runnable, since it started (Linux
    schedstat); None where the kernel does not say (macOS, Windows, schedstats off)."""
    try:
        with open(SCHEDSTAT, encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def load_data(waited: float | None, timed: float) -> dict[str, Any]:
    """bench's JSON "load": the share of the timed steps' wall time the timing thread waited for a core."""
    share = waited / timed if waited is not None and timed > 0 else None
    return {"waited_s": waited, "timed_s": timed, "waited_share": share, "limit": LOAD_LIMIT,
            "loaded": share is not None and share > LOAD_LIMIT,
            "what": f"time the timing thread waited for a core while runnable ({SCHEDSTAT}), as a share of the "
                    f"timed steps' wall time; above {LOAD_LIMIT:.0%} other processes decide the step times"}


def load_text(load: dict[str, Any]) -> str:
    return (f"the timing thread waited for a core {load['waited_share']:.0%} of the timed steps' wall time "
            f"(limit {load['limit']:.0%}): other processes, not routing, decided the step times")


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100])."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def paired_rounds(blocks: list[tuple[str, list[float]]]) -> list[list[tuple[float, float]]]:
    """The (routed seconds, native seconds) pairs of each round, from the timed blocks in the order
    they ran: a round is a routed and a native block side by side (either order), and step i of one
    pairs with step i of the other."""
    rounds = []
    for first, second in zip(blocks[::2], blocks[1::2], strict=False):
        times = dict((first, second))
        if set(times) == set(MODES):
            rounds.append(list(zip(times["routed"], times["native"], strict=False)))
    return rounds


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """A distribution-free interval for the median of independent `values`: the k-th smallest and k-th
    largest, k the largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 (the sign test's interval;
    its coverage is at least `confidence` whatever the values' distribution). None when n is too small
    for any k (fewer than 6 values at 95%)."""
    ordered = sorted(values)
    n = len(ordered)
    k, below = 0, 0.0
    while k < n // 2:
        below += math.comb(n, k) / 2 ** n  # P(Binomial(n, 1/2) <= k)
        if below > (1 - confidence) / 2:
            break
        k += 1
    return (ordered[k - 1], ordered[n - k]) if k else None


def alignment_interval(pairs: list[tuple[float, float]] | list[list[tuple[float, float]]],
                       confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The alignment and an interval for it, as bench's JSON records it: each round's ratio is the median
    of its per-pair ratios native / routed step time, the alignment the median of the rounds' ratios, and
    the interval the sign test's interval for that median over the rounds (`median_interval`).

    `pairs`: the rounds (lists of pairs, `paired_rounds`), or flat pairs, each then a round of its own.
    Why pairs: the two steps of a pair ran close together in one process, so slow drifts of the machine's
    load divide out of their ratio; why medians: a step descheduled for another process makes one ratio
    absurd, not the estimate. Why rounds are the samples: the pairs of one round share their moment's
    load (a burst that slows one block shifts all its pairs), so they are one piece of evidence, not five.
    Why not a bootstrap: resampling the rounds covered the true ratio in 83.5-98% of simulated runs for
    a stated 95% (below 95% in 15 of 16 cases) (tests/analysis/test_grade.py simulates load, drift, bursts and descheduling);
    the order-statistic interval assumes only that rounds are independent, and its coverage held there.
    Fewer than MIN_PAIRS pairs or MIN_ROUNDS rounds give no interval (low and high None)."""
    rounds = [group if isinstance(group, list) else [group] for group in pairs]
    ratio_rounds = [[n / r for r, n in group if r > 0] for group in rounds]
    ratio_rounds = [group for group in ratio_rounds if group]
    per_round = [statistics.median(group) for group in ratio_rounds]
    estimate = statistics.median(per_round) if per_round else math.nan
    count = sum(len(group) for group in ratio_rounds)
    bounds = median_interval(per_round, confidence) if count >= MIN_PAIRS and len(per_round) >= MIN_ROUNDS \
        else None
    low, high = bounds or (None, None)
    return {"estimate": estimate, "low": low, "high": high, "confidence": confidence, "pairs": count,
            "rounds": len(per_round),
            "method": f"median over rounds (a routed and a native block side by side) of each round's median "
                      f"per-pair ratio native / routed step time; {confidence:.0%} sign-test interval for "
                      f"that median (order statistics of the rounds' ratios); needs >= {MIN_PAIRS} pairs in "
                      f">= {MIN_ROUNDS} rounds"}


@dataclass
class ModeResult:
    latencies: list[float]
    memory: list[int]
    deltas: list[int]  # memory after - before each step: what the step itself kept
    peak: int

    def summary(self) -> dict[str, Any]:
        # From the median step, not the mean: on a shared machine one descheduled step would otherwise
        # decide the ratio of the two modes.
        median = statistics.median(self.latencies)
        return {"steps_per_s": 1 / median if median > 0 else math.inf,
                "total_s": sum(self.latencies),
                "latency_ms": {"median": median * 1e3,
                               "p90": percentile(self.latencies, 90) * 1e3},
                "peak_memory_bytes": self.peak,
                "memory_delta_bytes_per_step": statistics.fmean(self.deltas) if self.deltas else 0.0}


def _step_fn(spec: ModelSpec, model: torch.nn.Module, inputs: tuple, train: bool) -> Callable[[], None]:
    if not train:
        model.eval()

        def infer() -> None:
            with torch.no_grad():
                model(*inputs)
        return infer
    model.train()
    # AdamW: the optimizer most training loops use; its update ops are part of what a device must run.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        spec.loss(model(*inputs), inputs).backward()
        optimizer.step()
    return train_step


def _schedule(steps: int, block: int, first_round: int = 0) -> list[tuple[str, int]]:
    """(mode, steps) blocks, ABBA-ordered so neither mode always runs first after a switch (`first_round`:
    the index of the first round, to continue a schedule)."""
    plan: list[tuple[str, int]] = []
    done = 0
    round_index = first_round
    while done < steps:
        n = min(block, steps - done)
        order = MODES if round_index % 2 == 0 else MODES[::-1]
        plan += [(mode, n) for mode in order]
        done += n
        round_index += 1
    return plan


def bench(spec: ModelSpec, device: str, *, steps: int = 20, warmup: int = 3, train: bool = True,
          block: int | None = None, settled: Callable[[dict[str, Any]], bool] | None = None,
          max_steps: int | None = None, max_seconds: float = math.inf) -> Report:
    """Steps per second with routing on vs off on `device`, route time, peak memory and leak check.

    `settled` (with `max_steps`): after the `steps` pairs, while ``settled(alignment_interval)`` is false
    the run doubles its pairs, up to `max_steps` per mode and while the timing has taken less than
    `max_seconds` (a few looks at the data: steps, 2 x steps, 4 x steps, ..., so that looking again does
    not turn noise into a verdict). grade uses it to settle an alignment whose interval contains its
    threshold.

    Resets torch-fl's route statistics (it reads them per block). Raises UnsupportedOperatorError when
    the routed run meets an op the device cannot run."""
    from .. import runtime
    from ..routing import activated, deactivate, reset_route_stats, route_stats, routed_seconds
    from ..routing.current import use_device

    dev = use_device(device)
    deactivate()  # torch.fl.device()'s first use may have activated routing; each block sets its own mode

    def context(mode: str) -> contextlib.AbstractContextManager:
        return activated(device) if mode == "routed" else contextlib.nullcontext()

    model = copy.deepcopy(spec.model).to(dev)
    inputs = tree_map(lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t, spec.inputs)
    step = _step_fn(spec, model, inputs, train)
    block = block or max(2, min(5, steps // 4))

    for mode in MODES:
        progress(f"warm-up: {warmup} {mode} steps on {device}")
        with context(mode):
            for _ in range(warmup):
                step()
                runtime.synchronize(dev)
    progress("locating host syncs: one more routed step")
    with context("routed"):  # (after the warm-up: a first step's lazy set-up syncs once, not per step)
        syncs = syncs_data(locate(step, dev), dev)
        runtime.synchronize(dev)

    results = {mode: ModeResult([], [], [], 0) for mode in MODES}
    order: list[tuple[str, int]] = []
    blocks: list[tuple[str, list[float]]] = []  # (mode, its step times) in the order they ran
    route_seconds: Counter[RouteKind] = Counter()
    op_time: dict[tuple[str, str, str], list[float]] = {}
    load: dict[str, Any] = {"waited": 0.0, "timed": 0.0}  # over the timed steps of every block

    def run(mode: str, count: int, counter: Stage) -> None:
        result = results[mode]
        with context(mode):
            # A switch leaves cold caches (route caches, dispatch tables rewritten): untimed steps let them
            # settle, for SETTLE_STEPS and SETTLE_SECONDS at least.
            switched = time.perf_counter()
            for done_settling in itertools.count(1):
                step()
                runtime.synchronize(dev)
                order.append((mode, runtime.memory_allocated(dev)))  # steps too, for the leak slope
                if done_settling >= SETTLE_MAX_STEPS or (
                        done_settling >= SETTLE_STEPS and time.perf_counter() - switched >= SETTLE_SECONDS):
                    break
            reset_route_stats()
            runtime.reset_peak_memory_stats(dev)
            blocks.append((mode, []))
            waited_before, timing_began = waited_seconds(), time.perf_counter()
            for _ in range(count):
                runtime.synchronize(dev)
                before = runtime.memory_allocated(dev)
                start = time.perf_counter()
                step()
                runtime.synchronize(dev)
                result.latencies.append(time.perf_counter() - start)
                blocks[-1][1].append(result.latencies[-1])
                used = runtime.memory_allocated(dev)
                result.memory.append(used)
                result.deltas.append(used - before)
                order.append((mode, used))
                counter.advance()
            waited_after = waited_seconds()
            load["timed"] += time.perf_counter() - timing_began
            if waited_before is None or waited_after is None or load["waited"] is None:
                load["waited"] = None
            else:
                load["waited"] += waited_after - waited_before
            result.peak = max(result.peak, runtime.max_memory_allocated(dev))
            route_seconds.update(routed_seconds())
            for r in route_stats():
                calls_seconds = op_time.setdefault((r["op"], r["dtype"], r["route"]), [0, 0.0])
                calls_seconds[0] += r["calls"]
                calls_seconds[1] += r["seconds"]

    began = time.monotonic()
    plan = _schedule(steps, block)
    with stage(f"timing {steps} steps per mode in blocks of {block}", total=2 * steps, unit="steps") as counter:
        for mode, count in plan:
            run(mode, count, counter)
    done, rounds = steps, len(plan) // 2
    # more pairs do not settle what load decides: no extension on a loaded machine
    while settled is not None and max_steps and done < max_steps and time.monotonic() - began < max_seconds \
            and not load_data(load["waited"], load["timed"])["loaded"] \
            and not settled(alignment_interval(paired_rounds(blocks))):
        more = min(done, max_steps - done)
        plan = _schedule(more, block, first_round=rounds)
        with stage(f"alignment undecided after {done} pairs: timing {more} more steps per mode",
                   total=2 * more, unit="steps") as counter:
            for mode, count in plan:
                run(mode, count, counter)
        done, rounds = done + more, rounds + len(plan) // 2
    ops = [{"op": op, "dtype": dtype, "route": route, "calls": calls, "seconds": seconds}
           for (op, dtype, route), (calls, seconds) in sorted(op_time.items(), key=lambda kv: -kv[1][1])]
    from ..device import is_emulated

    report = _report(spec, device, done, warmup, train, block, results, order, dict(route_seconds), ops,
                     paired_rounds(blocks), load_data(load["waited"], load["timed"]), syncs,
                     emulated=is_emulated(dev))
    report.data["steps_requested"] = steps
    return report


def _report(spec: ModelSpec, device: str, steps: int, warmup: int, train: bool, block: int,
            results: dict[str, ModeResult], order: list[tuple[str, int]], route_seconds: dict[RouteKind, float],
            ops: list[dict[str, Any]], pairs: list[list[tuple[float, float]]], load: dict[str, Any],
            host_syncs: dict[str, Any] | None = None, *, emulated: bool = False) -> Report:
    routed, native = (results[m].summary() for m in MODES)
    interval = alignment_interval(pairs)
    alignment = interval["estimate"] if pairs else routed["steps_per_s"] / native["steps_per_s"]
    routed_time = sum(results["routed"].latencies)
    samples = [used for _, used in order]
    verdict = detect_leak(samples)
    data: dict[str, Any] = {
        "device": device, "model": spec.name, "steps": steps, "warmup": warmup, "train": train,
        "block": block, "settle": {"min_steps": SETTLE_STEPS, "min_seconds": SETTLE_SECONDS,
                                   "max_steps": SETTLE_MAX_STEPS},
        "emulated": emulated,
        "routed": routed, "native": native, "alignment": alignment, "target": TARGET,
        "alignment_interval": interval, "load": load,
        **({"host_syncs": host_syncs} if host_syncs is not None else {}),
        "route_seconds": {route: {"seconds": s, "share": s / routed_time if routed_time else 0.0}
                          for route, s in sorted(route_seconds.items())},
        "route_ops": ops[:20],
        "peak_memory_bytes": max(r.peak for r in results.values()),
        "memory": {"samples": samples, "modes": [mode for mode, _ in order],
                   "slope_bytes_per_step": verdict.slope, "growth_bytes": verdict.growth,
                   "leak": verdict.leak, "why": verdict.why, "rule": LEAK_RULE},
    }
    return _render(data, results)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _interval_text(interval: dict[str, Any]) -> str:
    if interval["low"] is None:
        return (f"(no interval: {_count(interval['pairs'], 'pair')} in {_count(interval['rounds'], 'round')}; it needs {MIN_PAIRS} "
                f"pairs in {MIN_ROUNDS} rounds)")
    return (f"({interval['confidence']:.0%} interval {interval['low']:.3f}-{interval['high']:.3f}, "
            f"{_count(interval['pairs'], 'pair')} in {_count(interval['rounds'], 'round')})")


def _alignment_verdict(data: dict[str, Any]) -> str:
    if data.get("emulated"):
        # grade says the same (NOT MEASURED): against the plain CPU the ratio is the emulation's cost
        return ("no verdict: on an emulated chip routing off is the plain CPU, so the ratio measures the "
                "emulation, not the chip; measure alignment on the device itself")
    if data["load"]["loaded"]:  # grade says the same (INCONCLUSIVE)
        return f"no verdict: {load_text(data['load'])}; rerun on a quieter machine"
    interval, target = data["alignment_interval"], data["target"]
    if interval["low"] is not None and interval["low"] >= target:
        return "meets the target"
    if interval["high"] is not None and interval["high"] < target:
        return "BELOW TARGET"
    return "UNCERTAIN (the interval straddles the target: rerun with more --steps)"


def _render(data: dict[str, Any], results: dict[str, ModeResult]) -> Report:
    routed, native, memory = data["routed"], data["native"], data["memory"]
    kind = "training" if data["train"] else "inference"
    summary = [
        ("model", data["model"]),
        ("device", f"{data['device']}: routing on vs off, {data['steps']} timed {kind} steps each "
                   f"(+{data['warmup']} warm-up), interleaved in blocks of {data['block']}"),
        ("routed", f"{routed['steps_per_s']:.3g} steps/s, latency median {routed['latency_ms']['median']:.1f}"
                   f" ms, p90 {routed['latency_ms']['p90']:.1f} ms"),
        ("native", f"{native['steps_per_s']:.3g} steps/s, latency median {native['latency_ms']['median']:.1f}"
                   f" ms, p90 {native['latency_ms']['p90']:.1f} ms"),
        ("alignment", f"{data['alignment']:.3f} {_interval_text(data['alignment_interval'])} (target >= "
                      f"{data['target']}): " + _alignment_verdict(data)),
        # the alignment is a median of paired ratios, the steps/s above each mode's median over all its
        # steps: their quotient is another number (load that hits one block moves it, not the paired median)
        ("", f"alignment = median over {_count(data['alignment_interval']['rounds'], 'round')} of each round's median "
             "pair ratio (native / routed time of neighbouring steps); the steps/s above are each mode's "
             f"median step over all its steps (their quotient, another statistic: "
             f"{routed['steps_per_s'] / native['steps_per_s']:.3f})"),
        ("load", f"waited for a core {data['load']['waited_share']:.0%} of the timed wall time (limit "
                 f"{LOAD_LIMIT:.0%})" if data["load"]["waited_share"] is not None else
                 "not measured here (no Linux schedstat)"),
        *([("host syncs", syncs_line(data["host_syncs"]))] if "host_syncs" in data else []),
        ("peak memory", f"{data['peak_memory_bytes'] / MIB:.1f} MiB"),
        ("memory leak", ("LEAK SUSPECTED" if memory["leak"] else "none detected")
                        + f" (slope {memory['slope_bytes_per_step'] / MIB:.3g} MiB/step)"),
    ]
    route_rows = [[route, v["seconds"], f"{v['share']:.1%}"] for route, v in data["route_seconds"].items()]
    routes = Section(
        "Time in non-native routes (routed mode)",
        text=["Wall time of outermost translate / fallback / kernel calls during the timed routed steps; "
              "share is of the routed steps' total time."] if route_rows else
             ["No op left its native route: routing costs nothing here."],
        tables=[Table(["route", "seconds", "share of step time"], route_rows)] if route_rows else [],
        charts=[Chart("bar", "Time per route", list(data["route_seconds"]),
                      [{"name": "seconds", "values": [v["seconds"] for v in data["route_seconds"].values()]}],
                      x_label="route", y_label="seconds")] if route_rows else [])
    if data["route_ops"]:
        routes.tables.append(Table(["op", "dtype", "route", "calls", "seconds (inclusive)"],
                                   [[r["op"], r["dtype"], r["route"], r["calls"], r["seconds"]]
                                    for r in data["route_ops"][:10]], title="Slowest routed ops"))
    longest = max(len(r.memory) for r in results.values())
    mem = Section(
        "Memory after each step",
        text=[f"Leak rule: {memory['rule']}.",
              f"This run: {memory['why']} -> {'LEAK' if memory['leak'] else 'no leak'}.",
              "Memory kept per step (after - before, mean): " + ", ".join(
                  f"{mode} {data[mode]['memory_delta_bytes_per_step'] / MIB:.3g} MiB" for mode in MODES)
              + " (a leak in one mode only points at that mode's code path)."],
        charts=[Chart("line", "Memory after each step", list(range(1, longest + 1)),
                      [{"name": mode, "values": [m / MIB for m in results[mode].memory]} for mode in MODES],
                      x_label="step (per mode)", y_label="MiB")])
    timing = Section("Step latency", tables=[Table(
        ["mode", "steps/s", "median ms", "p90 ms", "peak MiB"],
        [[mode, d["steps_per_s"], d["latency_ms"]["median"], d["latency_ms"]["p90"],
          d["peak_memory_bytes"] / MIB] for mode, d in (("routed", routed), ("native", native))])])
    warnings = []
    if data["load"]["loaded"] and not data.get("emulated"):
        warnings.append(f"{load_text(data['load'])}: the alignment has no verdict; rerun on a quieter machine")
    elif data["alignment"] < data["target"] and not data.get("emulated"):
        top = max(data["route_seconds"].items(), key=lambda kv: kv[1]["seconds"], default=None)
        warnings.append(f"alignment {data['alignment']:.2f} is below {data['target']}"
                        + (f"; {top[0]} routes take {top[1]['share']:.0%} of the routed step time "
                           f"(see 'Slowest routed ops')" if top else ""))
    noisy = [mode for mode in MODES
             if data[mode]["latency_ms"]["p90"] > NOISY * data[mode]["latency_ms"]["median"]]
    if noisy:
        warnings.append(f"step times vary a lot ({', '.join(noisy)}: p90 > {NOISY}x median): the machine is "
                        "busy or the steps are short; the alignment is uncertain, rerun with more --steps")
    if memory["leak"]:
        warnings.append(f"memory grows steadily across steps: {memory['why']}")
    sections = [timing, routes, mem]
    if data.get("host_syncs", {}).get("sites"):
        sections.append(syncs_section(data["host_syncs"], "Counted in one more routed step after the warm-up"))
    return Report(f"torchfl bench: {data['model']}", data, summary, sections, warnings)
