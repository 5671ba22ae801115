"""Where the time goes: a model's steps (or any code) under torch.profiler, read by route.

Every non-native call runs inside a profiler range ``fl::ROUTE OP`` (routing/router.py), and a copying
fallback's copies inside ``fl::to_host`` / ``fl::to_device``; native calls are never intercepted, so
they are plain aten events. From one profile this module gives:

- the time by route: the inclusive CPU time of the outermost ``fl::`` ranges per route, each with the aten
  event around it (the call into the router) where there is one (a translation's sub-ops routed again are
  counted once, in their outermost range), against the profiled wall time;
- the top ops by self time with their routes: each aten event's route is the ``fl::`` range directly
  under it (the router it reached), else ``native``; ``inside`` names the ``fl::`` range it ran in (a
  translation's sub-op), and the ``fl::`` ranges themselves appear with their own time (the router's
  Python, a registered kernel's body, a CPU-key or emulated fallback's kernel);
- the host<->device copies: the fallback copies' ranges, the device's memcpy activities where the
  profiler records them (CUDA), and the emulated device's transfer counters (route_stats()["transfers"]).

On an emulated chip the written trace also shows its kernels and copies as device activity, as Kineto
writes a GPU's (routing/emu/profiling.py's add_device_tracks).

``torch.fl.profile()`` (profile below) is the context manager; ``torchfl profile MODEL --device D`` runs
warm-up and N steps of a model entry point with routing active and prints the report (profile_model), and
``torchfl profile train.py`` a training script's optimizer steps (profile_script); timeline_html draws one step
of a trace as a self-contained page.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_map

from .._names import RouteKind
from ..report import Chart, Report, Section, Table, progress, stage
from .host_syncs import syncs_data, syncs_line, syncs_section
from .model import ModelSpec

RANGE = "fl::"
COPY_RANGES = {"fl::to_host": "to_host", "fl::to_device": "to_device"}
TOP = 15  # ops in the report's top list
US = 1e-6


_KINDS = {kind.value: kind for kind in RouteKind}  # a range name's first word


def _route_of(name: str) -> tuple[RouteKind, str] | None:
    """(RouteKind.TRANSLATE, 'aten::gelu.default') for a route range's name, None for any other event."""
    if not name.startswith(RANGE) or name in COPY_RANGES:
        return None
    word, _, op = name[len(RANGE):].partition(" ")
    kind = _KINDS.get(word)
    return (kind, op) if op and kind is not None else None


def _op_base(op: str) -> str:
    """aten::gelu.default -> aten::gelu (the profiler names aten events without the overload)."""
    namespace, _, rest = op.partition("::")
    return f"{namespace}::{rest.split('.', 1)[0]}"


@dataclass
class Profile:
    """What one profile found; `prof` is the torch.profiler.profile object (export_chrome_trace,
    key_averages, events), `wall_s` the profiled wall time."""

    prof: Any = None
    wall_s: float = 0.0
    steps: int = 0
    transfers: dict[str, int] = field(default_factory=dict)
    trace: str | None = None
    device_tracks: dict[str, Any] | None = None  # what the trace's export added as an emulated chip's activity

    def summary(self, top: int = TOP) -> dict[str, Any]:
        """The time by route, the top ops by self time and the copies, as JSON-ready data."""
        if self.prof is None:
            raise RuntimeError("the profile has not run yet: read its summary after the `with "
                               "torch.fl.profile() as p:` block has ended")
        events = [e for e in self.prof.events() if getattr(e, "device_type", None) is None
                  or str(e.device_type).endswith("CPU")]
        calls: Counter[tuple[RouteKind, str]] = Counter()
        route_us: Counter[RouteKind] = Counter()
        op_us: Counter[tuple[RouteKind, str]] = Counter()  # (route, op) -> CPU time of its outermost ranges
        copies = {"to_host": [0, 0.0], "to_device": [0, 0.0]}
        ops: dict[tuple[str, str, str], list[float]] = {}
        for event in events:
            name = event.name
            routed = _route_of(name)
            if routed is not None:
                calls[routed] += 1
                if not any(_route_of(a.name) for a in _ancestors(event)):
                    # the aten event around the range: the call into the router (dispatch, argument
                    # handling before the range opens) is the route's time too
                    parent = event.cpu_parent
                    owner = parent if parent is not None and parent.name == _op_base(routed[1]) else event
                    route_us[routed[0]] += owner.cpu_time_total
                    op_us[routed] += owner.cpu_time_total
            elif name in COPY_RANGES:
                copy_ = copies[COPY_RANGES[name]]
                copy_[0] += 1
                copy_[1] += event.cpu_time_total * US
            if name.startswith("ProfilerStep"):  # (the step markers: the whole step, not an op)
                continue
            # a route, or "-" (a user or autograd range) or "router" (a route range: the router's own time)
            route: RouteKind | str = RouteKind.NATIVE if name.startswith("aten::") else "-"
            if routed is not None:
                route = "router"
            else:
                for child in event.cpu_children:
                    child_route = _route_of(child.name)
                    if child_route is not None and _op_base(child_route[1]) == name:
                        route = child_route[0]
                        break
            inside = next((a.name for a in _ancestors(event) if _route_of(a.name)), "")
            row = ops.setdefault((name, route, inside), [0, 0.0, 0.0])
            row[0] += 1
            row[1] += event.self_cpu_time_total * US
            row[2] += getattr(event, "self_device_time_total", 0.0) * US
        memcpy = Counter()
        for event in self.prof.events():
            if "memcpy" in event.name.lower() and getattr(event, "device_type", None) is not None \
                    and not str(event.device_type).endswith("CPU"):
                memcpy[event.name] += 1
        memcpy_bytes: Counter[str] = Counter()
        for name, row in ((self.device_tracks or {}).get("memcpy") or {}).items():  # (an emulated chip's)
            memcpy[name] += row["calls"]
            memcpy_bytes[name] += row["bytes"]
        wall = self.wall_s or 0.0
        by_route = {route: {"seconds": us * US, "share": (us * US / wall) if wall else 0.0,
                            "calls": sum(n for (r, _), n in calls.items() if r == route)}
                    for route, us in sorted(route_us.items(), key=lambda kv: -kv[1])}
        top_ops = [{"op": name, "route": route, "inside": inside, "calls": int(n), "self_cpu_s": cpu,
                    "self_device_s": dev}
                   for (name, route, inside), (n, cpu, dev) in
                   sorted(ops.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:top]]
        return {"wall_s": wall, "steps": self.steps, "trace": self.trace, "by_route": by_route,
                "route_calls": [{"route": r, "op": op, "calls": n} for (r, op), n in
                                sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))],
                "route_ops": [{"route": r, "op": op, "seconds": us * US, "share": us * US / wall if wall else 0.0}
                              for (r, op), us in sorted(op_us.items(), key=lambda kv: -kv[1])],
                "top_ops": top_ops,
                "copies": {"fallback": {k: {"calls": v[0], "seconds": v[1]} for k, v in copies.items()},
                           "device_memcpy": dict(memcpy), "device_memcpy_bytes": dict(memcpy_bytes),
                           "emulated": self.transfers}}


def _ancestors(event: Any) -> Iterator[Any]:
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def activities(device: torch.device | None) -> list[Any]:
    """The CPU, plus the device's own activity where torch.profiler has one for it (CUDA's CUPTI, XPU, a vendor
    plugin's PrivateUse1 profiler, and an emulated chip's, whose ops become device activity in the trace:
    routing/emu/profiling.py). With no device: the CPU, and the emulated chip's activity where this process
    has one (its trace shows its kernels as a profile with torch.profiler's default activities does)."""
    kinds = [torch.profiler.ProfilerActivity.CPU]
    if device is not None and device.type == "cpu":
        return kinds
    emulated = _emulated_activity()
    if device is None:
        return kinds + ([emulated] if emulated is not None else [])
    from ..device import is_emulated

    if is_emulated(device):
        return kinds + ([emulated] if emulated is not None else [])
    by_type = {"cuda": "CUDA", "xpu": "XPU", "mtia": "MTIA"}
    name = by_type.get(device.type) or ("PrivateUse1" if device.type == torch._C._get_privateuse1_backend_name()
                                         else None)
    activity = getattr(torch.profiler.ProfilerActivity, name, None) if name else None
    if activity is not None and activity in torch.profiler.supported_activities():
        kinds.append(activity)
    return kinds


def _emulated_activity() -> Any:
    """torch.profiler's PrivateUse1 activity when an emulated device is set up in this process (its profiles
    record the device's ops: routing/emu/profiling.py) and torch.profiler supports it, else None."""
    tracks = sys.modules.get("torch_fl.routing.emu.profiling")
    activity = getattr(torch.profiler.ProfilerActivity, "PrivateUse1", None)
    if tracks is None or tracks._original_init is None or activity not in torch.profiler.supported_activities():
        return None
    return activity


def _transfers() -> dict[str, int]:
    from ..routing.stats import transfers

    return transfers()


@contextlib.contextmanager
def profile(trace: str | None = None, *, device: Any = None, **kwargs: Any) -> Iterator[Profile]:
    """Profile the block with torch.profiler (CPU, plus the device's activity where there is one); the
    routes show as ``fl::ROUTE OP`` ranges. `trace`: a Chrome/Perfetto trace file written at the end.
    Other keyword arguments go to torch.profiler.profile (record_shapes=True, with_stack=True, ...).

    Example:
        >>> with torch.fl.profile("trace.json") as p:  # doctest: +SKIP
        ...     model(x)
        >>> p.summary()["by_route"]  # doctest: +SKIP
        {'translate': {'seconds': 0.0031, 'share': 0.12, 'calls': 24}}
    """
    from ..routing.current import use_device

    if torch._C._autograd._profiler_enabled():
        raise RuntimeError(
            "torch.fl.profile: a profiler is already active on this thread, and torch.profiler cannot nest "
            "(the inner one would stop the outer one). End the other profiler first, or read the fl:: route "
            "ranges from it after it ends: torch_fl.analysis.profile.Profile(prof=that_profiler).summary()")
    dev = use_device(device) if device is not None else None
    kwargs.setdefault("activities", activities(dev))
    result = Profile()
    before = _transfers()
    with torch.profiler.profile(**kwargs) as prof:
        start = time.perf_counter()
        try:
            yield result
        finally:
            result.wall_s = time.perf_counter() - start
    result.prof = prof
    after = _transfers()
    result.transfers = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    if trace:
        prof.export_chrome_trace(str(trace))  # (on an emulated chip the export adds its device tracks)
        result.trace = str(trace)
        tracks = sys.modules.get("torch_fl.routing.emu.profiling")
        result.device_tracks = tracks.device_tracks(prof) if tracks is not None else None


def profile_model(spec: ModelSpec, device: str, *, steps: int = 5, warmup: int = 2, train: bool = True,
                  trace: str | None = None) -> Report:
    """Warm-up and `steps` steps of `spec` on `device` with routing active, the steps under the profiler
    (each in a ``ProfilerStep#N`` range, as torch.profiler's schedule names them), after one more step that
    locates the host syncs (host_syncs.locate); the report of `report`. Resets torch-fl's route statistics
    before the profiled steps, as bench does: route_stats() then holds those steps' calls, the same counts as
    the trace's fl:: ranges. Raises UnsupportedOperatorError when the device cannot run the model."""
    from .. import runtime
    from ..routing import activated, reset_route_stats
    from ..routing.current import use_device
    from .bench import _step_fn
    from .host_syncs import locate

    dev = use_device(device)
    model = copy.deepcopy(spec.model).to(dev)
    inputs = tree_map(lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t, spec.inputs)
    with activated(device):
        step = _step_fn(spec, model, inputs, train)
        progress(f"warm-up: {warmup} steps on {device}")
        for _ in range(warmup):
            step()
            runtime.synchronize(dev)
        progress("locating host syncs: one more step")
        syncs = locate(step, dev)  # (after the warm-up: a first step's lazy set-up syncs once, not per step)
        runtime.synchronize(dev)
        reset_route_stats()
        with stage(f"profiling {steps} steps on {device}", total=steps, unit="steps") as counter, \
                profile(trace, device=dev) as result:
            for i in range(steps):
                with torch.profiler.record_function(f"ProfilerStep#{i}"):
                    step()
                    runtime.synchronize(dev)
                counter.advance()
        result.steps = steps
    if trace:
        progress(f"wrote {trace}")
    data = {"model": spec.name, "device": device, "train": train, "warmup": warmup, **result.summary(),
            "host_syncs": syncs_data(syncs, dev)}
    return report(data)


class _Profiled(SystemExit):
    """Raised from the optimizer's step hook once the profiled steps have run: the script's other steps are not
    its profile's (a SystemExit, so that the script runner returns its code, 0)."""


def profile_script(script: str, argv: list[str], device: str, *, steps: int = 5, warmup: int = 2,
                   trace: str | None = None) -> tuple[Report, int]:
    """Run a training script (``python script argv...``) on `device` with routing active and the CUDA alias
    (as `torchfl run` runs it), and profile `steps` of its steps after `warmup`: a step ends where an optimizer
    step ends (``torch.optim.Optimizer``'s global step hook), each profiled one is a ``ProfilerStep#N`` range,
    and the script stops after the last (its remaining steps would only repeat them). With `warmup` 0 the
    profile starts with the script, so a script without an optimizer (inference) is profiled whole. Returns the
    report of `report` (no host syncs: no step function to run again) and the script's exit status."""
    from ..migrate.alias import cuda_alias
    from ..migrate.script import run_target
    from ..routing import reset_route_stats
    from ..routing.current import use_device

    dev = use_device(device)
    kinds = activities(dev)
    session: dict[str, Any] = {"done": 0, "prof": None, "step": None, "start": 0.0, "before": {}}

    def begin() -> None:
        reset_route_stats()  # (route_stats() then holds the profiled steps' calls: the trace's fl:: ranges)
        session["before"] = _transfers()
        session["prof"] = torch.profiler.profile(activities=kinds)
        session["prof"].start()
        session["start"] = time.perf_counter()
        open_step()

    def open_step() -> None:
        session["step"] = torch.profiler.record_function(f"ProfilerStep#{session['done'] - warmup}")
        session["step"].__enter__()

    def end() -> None:
        if session["step"] is not None:
            session["step"].__exit__(None, None, None)
            session["step"] = None
        if session["prof"] is not None and session.get("wall") is None:
            session["wall"] = time.perf_counter() - session["start"]
            session["prof"].stop()

    def stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
        session["done"] += 1
        if session["done"] == warmup:
            begin()
        elif session["done"] > warmup and session["prof"] is not None:
            session["step"].__exit__(None, None, None)
            session["step"] = None
            if session["done"] - warmup >= steps:
                end()
                raise _Profiled(0)
            open_step()

    from torch.optim.optimizer import register_optimizer_step_post_hook

    hook = register_optimizer_step_post_hook(stepped)
    try:
        progress(f"running {script} on {device}: {warmup} warm-up steps, then {steps} profiled (a step: an "
                 f"optimizer step)")
        with cuda_alias(device):
            if warmup == 0:
                begin()
            code = run_target(script, None, argv)
    finally:
        hook.remove()
        end()
    prof = session["prof"]
    if prof is None:
        raise ValueError(f"{script} made {session['done']} optimizer step{'' if session['done'] == 1 else 's'} "
                         f"(exit status {code}), fewer than the {warmup} warm-up steps, so nothing was profiled: "
                         f"pass --warmup {session['done']} or fewer (--warmup 0 profiles the script from its start, "
                         f"also one without an optimizer)")
    result = Profile(prof=prof, wall_s=session["wall"], steps=max(min(session["done"] - warmup, steps), 0))
    after = _transfers()
    result.transfers = {k: after.get(k, 0) - session["before"].get(k, 0) for k in after}
    if trace:
        prof.export_chrome_trace(str(trace))
        result.trace = str(trace)
        tracks = sys.modules.get("torch_fl.routing.emu.profiling")
        result.device_tracks = tracks.device_tracks(prof) if tracks is not None else None
        progress(f"wrote {trace}")
    data = {"model": script, "device": device, "train": session["done"] > 0, "warmup": warmup, **result.summary()}
    return report(data), code


def report(data: dict[str, Any]) -> Report:
    """The text / JSON / HTML report of a profile summary (`Profile.summary()` plus model and device)."""
    wall, steps = data["wall_s"], data.get("steps") or 0
    routed = sum(v["seconds"] for v in data["by_route"].values())
    summary = [("model", data.get("model", "")), ("device", data.get("device", "")),
               ("profiled", f"{steps} {'training' if data.get('train', True) else 'inference'} steps "
                            f"(+{data.get('warmup', 0)} warm-up), {wall * 1e3:.1f} ms wall"
                            + (f", {wall / steps * 1e3:.2f} ms/step" if steps else "")),
               ("non-native", f"{routed * 1e3:.2f} ms, {routed / wall if wall else 0:.1%} of the wall time"),
               ("trace", data.get("trace") or "not written (--trace FILE)")]
    if "host_syncs" in data:
        summary.insert(-1, ("host syncs", syncs_line(data["host_syncs"])))
    route_rows = [[route, v["calls"], v["seconds"] * 1e3, f"{v['share']:.1%}"] for route, v in
                  data["by_route"].items()]
    routes = Section(
        "Time by route",
        text=["CPU time of the outermost fl:: ranges per route, with the aten call around each (inclusive: a "
              "translation's sub-ops count in it); share is of the profiled wall time. Native ops are not "
              "intercepted: the rest of the step."]
        if route_rows else ["No op left its native route: every op ran on the device's own kernels."],
        tables=[Table(["route", "calls", "ms", "share of wall"], route_rows)] if route_rows else [],
        charts=[Chart("bar", "Time by route", list(data["by_route"]),
                      [{"name": "ms", "values": [v["seconds"] * 1e3 for v in data["by_route"].values()]}],
                      x_label="route", y_label="ms")] if route_rows else [])
    if data["route_calls"]:
        routes.tables.append(Table(["route", "op", "calls"], [[r["route"], r["op"], r["calls"]]
                                                               for r in data["route_calls"][:TOP]],
                                   title="Routed calls (equal to route_stats() for the profiled steps)"))
    top = Section("Top ops by self time", text=[
        "route: the router an aten op reached (native when none; '-' for other ranges); 'router' rows are an fl:: range's own "
        "time: the router's Python and what it calls without an aten event (a registered kernel's body, a "
        "fallback's CPU kernel on the CPU key or an emulated chip); inside: the fl:: range the op ran in (a translation's sub-op)."],
        tables=[Table(["op", "route", "inside", "calls", "self CPU ms", "self device ms"],
                      [[r["op"], r["route"], r["inside"] or "-", r["calls"], r["self_cpu_s"] * 1e3,
                        r["self_device_s"] * 1e3] for r in data["top_ops"]])])
    copies = data["copies"]
    sized = copies.get("device_memcpy_bytes", {})
    rows = [[f"fallback {kind}", v["calls"], v["seconds"] * 1e3, "-"] for kind, v in copies["fallback"].items()]
    rows += [[name, n, "-", sized.get(name, "-")] for name, n in copies["device_memcpy"].items()]
    emu = copies["emulated"]
    if any(emu.values()):
        rows += [["emulated host->device", emu.get("h2d_calls", 0), "-", emu.get("h2d_bytes", 0)],
                 ["emulated device->host", emu.get("d2h_calls", 0), "-", emu.get("d2h_bytes", 0)],
                 ["emulated syncs", emu.get("syncs", 0), "-", "-"]]
    transfers = Section("Host<->device copies", text=[
        "Fallback copies are the fl::to_host / fl::to_device ranges of ops that ran on the CPU; device memcpy "
        "events are the profiler's own (CUDA), and on an emulated chip those of its trace (its copies, and the "
        "two copies each CPU fallback would make on the chip); the emulated device also counts its copies and "
        "syncs."],
        tables=[Table(["copy", "calls", "ms", "bytes"], rows)])
    sections = [routes, top, transfers]
    if "host_syncs" in data:
        sections.append(syncs_section(data["host_syncs"], "Counted in one more step after the profiled ones"))
    warnings = []
    if route_rows and wall and routed / wall >= 0.1:
        worst = max(data["by_route"].items(), key=lambda kv: kv[1]["seconds"])
        first = next((r for r in data["route_calls"] if r["route"] == worst[0]), None)
        warnings.append(f"{worst[0]} routes take {worst[1]['share']:.0%} of the profiled time"
                        + (f" (most calls: {first['op']})" if first else "")
                        + "; give the hot ops a native kernel (torch.fl.register_kernel) or ask the vendor for one")
    return Report(f"torchfl profile: {data.get('model', '')}", data, summary, sections, warnings)


# What a route's ops are called in a sentence ("3 translated ops take ...").
ROUTE_WORDS = {"translate": "translated", "fallback": "CPU-fallback", "kernel": "registered-kernel"}
CITED_OPS = 3  # ops named in the sentence


def cite(data: dict[str, Any]) -> str | None:
    """The sentence that says where a profile's non-native time goes, for bench and grade to quote when
    alignment is below target: '3 translated ops take 38% of the step: aten::a, aten::b, aten::c'. The
    route with the most time; None when no op left its native route."""
    if not data.get("by_route"):
        return None
    route, spent = max(data["by_route"].items(), key=lambda kv: kv[1]["seconds"])
    ops = [r for r in data.get("route_ops", []) if r["route"] == route]
    count = len(ops) or spent["calls"]
    names = ", ".join(f"{r['op']} ({r['share']:.0%})" for r in ops[:CITED_OPS])
    more = f" and {len(ops) - CITED_OPS} more" if len(ops) > CITED_OPS else ""
    word = ROUTE_WORDS.get(route, route)
    return (f"{count} {word} op{'' if count == 1 else 's'} take{'s' if count == 1 else ''} "
            f"{spent['share']:.0%} of the step: {names}{more}")


def profile_citation(spec: ModelSpec, device: str, *, train: bool = True, steps: int = 3) -> dict[str, Any]:
    """A short profile of `spec` on `device` for a report whose alignment is below target: the sentence
    (`cite`), the time by route, and the command that gives the whole profile."""
    data = profile_model(spec, device, steps=steps, warmup=1, train=train).data
    command = (f"torchfl profile {spec.name} --device {device}{'' if train else ' --no-train'} "
               f"--trace trace.json")
    return {"text": cite(data), "by_route": data["by_route"], "route_ops": data["route_ops"][:TOP],
            "steps": steps, "command": command}


def add_citation(report: Report, spec: ModelSpec, device: str, *, train: bool = True) -> None:
    """Profile `spec` briefly and quote where the time goes in `report` (bench's or grade's, whose alignment
    is below target): a warning with `cite`'s sentence and the command for the whole profile, and the
    numbers as ``report.data["profile"]``."""
    progress("alignment below target: profiling 3 steps to say where the time goes")
    cited = profile_citation(spec, device, train=train)
    report.data["profile"] = cited
    if cited["text"]:
        report.warnings.append(f"where the time goes ({cited['steps']} profiled steps): {cited['text']}; "
                               f"the whole profile: {cited['command']}")
    else:
        report.warnings.append(f"profiled {cited['steps']} steps: no op left its native route, so routing is "
                               f"not what slows this model (noise or the device itself); the whole profile: "
                               f"{cited['command']}")


# A static timeline of a trace --------------------------------------------------------------------------------
# Perfetto's UI is a web app loaded from the internet and TensorBoard's trace view loads a polyfill from a CDN;
# this draws one profiler step of a Chrome trace as one self-contained HTML page (an SVG: no script, no
# network), the host's threads with their nested ranges and each device's streams below them, as those
# viewers lay a GPU trace out. Hovering an event shows its name, duration and arguments.
_LANE = 15        # px per nesting level / stream
_LABELS = 200     # px of the row labels
_WIDTH = 1280
_DEPTH = 14       # nesting levels drawn per host thread (deeper ranges are left out, and counted)
_COLOURS = (("ProfilerStep#", "#d7d7d7"), ("fl::translate", "#f28e2b"), ("fl::fallback", "#e15759"),
            ("fl::kernel", "#b07aa1"), ("fl::to_", "#ff9da7"), ("Memcpy HtoD", "#76b7b2"),
            ("Memcpy DtoH", "#edc948"), ("Memcpy", "#8cd17d"), ("PythonSubclass", "#c9c3bf"),
            ("aten::", "#8fb3d9"))
_LEGEND = (("fl::translate", "#f28e2b"), ("fl::fallback", "#e15759"), ("fl::kernel", "#b07aa1"),
           ("aten op (host)", "#8fb3d9"), ("other range", "#b9d7a8"), ("device kernel", "#59a14f"),
           ("Memcpy DtoH", "#edc948"), ("Memcpy HtoD", "#76b7b2"))


def _colour(event: dict[str, Any]) -> str:
    if event.get("cat") == "kernel":
        return "#59a14f"
    name = event.get("name", "")
    return next((colour for prefix, colour in _COLOURS if name.startswith(prefix)), "#b9d7a8")


def timeline_html(trace: str | dict[str, Any], *, step: int | None = None, title: str = "") -> str:
    """One profiler step of the Chrome trace `trace` (a path or the loaded JSON) as a self-contained HTML
    page; `step`: which ``ProfilerStep#N`` (default: the second where there are several, the first step
    often carries one-time work; the whole trace where there is none)."""
    import html
    import json

    if not isinstance(trace, dict):
        with open(trace) as file:
            trace = json.load(file)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e
              and e.get("cat") not in ("cuda_runtime", "python_function")
              and not str(e.get("name", "")).startswith("PyTorch Profiler")]  # (the profiler's own span)
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    if step is not None:
        chosen = [e for e in steps if e["name"] == f"ProfilerStep#{step}"]
        if not chosen:
            raise ValueError(f"the trace has no ProfilerStep#{step} (it has {len(steps)} steps: "
                             f"{', '.join(e['name'] for e in steps) or 'none'}); pass one of those, or no step")
        window = chosen[0]
    else:
        window = steps[1] if len(steps) > 1 else (steps[0] if steps else None)
    if window is not None:
        start, end = window["ts"], window["ts"] + window["dur"]
    else:
        start = min((e["ts"] for e in events), default=0.0)
        end = max((e["ts"] + e["dur"] for e in events), default=start + 1.0)
    span = max(end - start, 1e-3)
    names: dict[tuple[Any, Any], str] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            key = (e["pid"], None if e["name"] == "process_name" else e["tid"])
            names[key] = str(e.get("args", {}).get("name", ""))
    rows: dict[tuple[Any, Any], list[dict]] = {}
    for e in events:
        if e["ts"] < end and e["ts"] + e["dur"] > start:
            rows.setdefault((e["pid"], e["tid"]), []).append(e)
    device_rows = sorted(k for k, v in rows.items() if any(e.get("cat") in ("kernel", "gpu_memcpy") for e in v))
    host_rows = sorted((k for k in rows if k not in device_rows), key=lambda k: -len(rows[k]))
    scale = (_WIDTH - _LABELS - 20) / span
    svg: list[str] = []
    y = 70
    left_out = 0
    for key in [*host_rows, *device_rows]:
        thread = sorted(rows[key], key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        placed = []
        for e in thread:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            depth = len(stack) if key in host_rows else 0
            stack.append(e["ts"] + e["dur"])
            if depth >= _DEPTH:
                left_out += 1
                continue
            placed.append((depth, e))
        process, name = names.get((key[0], None), str(key[0])), names.get(key, f"thread {key[1]}")
        # a device's row: its process ("npu:0 (emulated by torch-fl)") over its stream; a host thread's: its name
        label = [process, name] if key in device_rows else [f"host: {name or 'thread'}"]
        lanes = max(1 + max((d for d, _ in placed), default=0), len(label))
        svg.append("".join(f'<text x="6" y="{y + 11 + i * 13}" class="row">{html.escape(line[:32])}</text>'
                           for i, line in enumerate(label))
                   + f'<line x1="0" x2="{_WIDTH}" y1="{y - 2}" y2="{y - 2}" class="rule"/>')
        for depth, e in placed:
            x0 = _LABELS + max(e["ts"] - start, 0.0) * scale
            x1 = _LABELS + min(e["ts"] + e["dur"] - start, span) * scale
            width = max(x1 - x0, 0.6)
            top = y + depth * _LANE
            args = e.get("args", {})
            detail = "".join(f"\n{k}: {args[k]}" for k in ("bytes", "fallback", "stream") if k in args)
            tip = html.escape(f"{e['name']}\n{e['dur']:.1f} us{detail}")
            svg.append(f'<rect x="{x0:.1f}" y="{top}" width="{width:.1f}" height="{_LANE - 2}" '
                       f'fill="{_colour(e)}"><title>{tip}</title></rect>')
            if width > 36:
                text = e["name"] if width / 5.6 >= len(e["name"]) else e["name"][:max(int(width / 5.6) - 1, 1)] + "…"
                svg.append(f'<text x="{x0 + 2:.1f}" y="{top + 10}" class="ev">{html.escape(text)}</text>')
        y += lanes * _LANE + 8
    ticks = []
    for i in range(6):
        x = _LABELS + i * (_WIDTH - _LABELS - 20) / 5
        anchor = "end" if i == 5 else "start"
        ticks.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="52" y2="{y}" class="tick"/>'
                     f'<text x="{x + (-2 if i == 5 else 2):.1f}" y="62" class="axis" text-anchor="{anchor}">'
                     f'{span * i / 5 / 1e3:.2f} ms</text>')
    legend = "".join(f'<rect x="{_LABELS + i * 130}" y="30" width="12" height="12" fill="{c}"/>'
                     f'<text x="{_LABELS + i * 130 + 16}" y="40" class="axis">{html.escape(n)}</text>'
                     for i, (n, c) in enumerate(_LEGEND))
    heading = html.escape(title or "torch-fl profile")
    what = html.escape(window["name"] if window is not None else "the whole trace")
    note = f" · {left_out} ranges deeper than {_DEPTH} levels not drawn" if left_out else ""
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{heading}</title><style>'
            "body{margin:0;font-family:sans-serif;background:#fff}"
            ".row{font-size:11px;fill:#222}.ev{font-size:9px;fill:#111;pointer-events:none}"
            ".axis{font-size:10px;fill:#444}.tick{stroke:#e4e4e4}.rule{stroke:#bbb}"
            f"</style></head><body><svg xmlns='http://www.w3.org/2000/svg' width='{_WIDTH}' height='{y + 10}'>"
            f'<text x="6" y="18" style="font-size:14px;font-weight:bold">{heading}</text>'
            f'<text x="{_WIDTH - 10}" y="18" class="axis" text-anchor="end">{what}: {span / 1e3:.2f} ms{note}</text>'
            f"{legend}{''.join(ticks)}{''.join(svg)}</svg></body></html>")
