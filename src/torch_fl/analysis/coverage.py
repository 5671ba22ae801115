"""Operator coverage of a model on a device: the route every traced (op, dtype) takes there.

The model is traced without compute (trace.py), so any described device can be checked from any
machine: ``cuda``, ``mps``, ``emu:minimal``, ``cpu``, a vendor's .toml. Routes come from the device's
route table (torch_fl.routing.table), as ``torchfl routes show`` prints them, with one addition: an op
whose dtype is not in the description's ``precision.dtypes`` cannot run there at all, so a translation
(which computes in the same dtype) does not help; it is reported as unsupported.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from ..routing import route_table
from ..routing.table import ROUTES, Route, RouteTable
from .model import ModelSpec
from .report import Chart, Report, Section, Table, progress
from .trace import MODEL, OPTIMIZER, OpRecord, trace

NATIVE_CALLS_WARNING = 0.8  # below this native share of calls a model is far from ready
# The order in which non-native routes are listed: what stops a run first, what is slow next.
_SEVERITY = ("unsupported", "fallback", "translate", "kernel")
_SDPA_PREFIX = "aten::_scaled_dot_product_"


def classify(table: RouteTable, record: OpRecord) -> Route:
    """The route of one traced (op, dtype) on the table's device."""
    route = table.route(record.op, record.dtype)
    desc = table.description
    if route.kind == "translate" and record.dtype is not None and record.dtype not in desc.dtypes:
        return Route("unsupported", f"description '{desc.name}' ({desc.path}) precision.dtypes: no "
                                    f"{record.dtype} on this device, so a translation cannot run either")
    return route


def coverage(spec: ModelSpec, device: str, train: bool = False, amp: bool = False) -> Report:
    """Trace `spec` and classify every (op, dtype) it calls with the route table of `device`.

    Args:
        spec: the model (``torch_fl.analysis.model.load_model``).
        device: a description name (``cuda``, ``mps``, ``cpu``), ``emu:NAME`` or a description .toml path.
        train: trace a training step (forward, loss, backward, one AdamW step) instead of inference.
        amp: run the forward pass under autocast with the description's ``precision.autocast_dtype``.

    Returns:
        A Report whose ``data`` is the documented JSON (docs/analysis.md, "torchfl coverage").

    Example:
        >>> from torch_fl.analysis.model import load_model
        >>> spec = load_model("examples/gpt.py:factory")  # doctest: +SKIP
        >>> report = coverage(spec, "emu:minimal", train=True)  # doctest: +SKIP
        >>> report.data["summary"]["native_calls_share"]  # doctest: +SKIP
        0.88
    """
    table = route_table(device)
    desc = table.description
    fused = desc.section("ops")["fused_attention"]
    # The CPU's fused attention kernels exist on the CPU only: on another device type the trace takes
    # the math path, what every device can run and what SDPA falls back to when no fused kernel fits.
    math_attention = not fused or desc.device_type != "cpu"
    what = "a training step (forward, loss, backward, AdamW step)" if train else "a forward pass"
    progress(f"tracing {what} of {spec.name} on fake tensors"
             + (f" under autocast({desc.autocast_dtype})" if amp else ""))
    records = trace(spec, train=train, amp=amp, amp_dtype=desc.autocast_dtype,
                    math_attention=math_attention)
    progress(f"classifying {len(records)} (op, dtype) pairs with the routes of '{desc.name}'")
    routes = [classify(table, record) for record in records]
    data = _data(spec, desc.name, records, routes)
    data["notes"] = _notes(desc, records, train=train, amp=amp, fused=fused, math_attention=math_attention)
    return _report(spec, device, data, what + (f" under autocast({desc.autocast_dtype})" if amp else ""))


def _data(spec: ModelSpec, device: str, records: list[OpRecord], routes: list[Route]) -> dict[str, Any]:
    calls = sum(r.calls for r in records)
    per_route = dict.fromkeys(ROUTES, 0)
    for record, route in zip(records, routes, strict=True):
        per_route[route.kind] += record.calls
    native_ops = sum(route.kind == "native" for route in routes)
    return {
        "device": device,
        "model": spec.name,
        "summary": {
            "native_ops_share": native_ops / len(records) if records else 1.0,
            "native_calls_share": per_route["native"] / calls if calls else 1.0,
            "ops": len(records),
            "calls": calls,
            "routes": per_route,
        },
        "ops": [{"op": record.op, "dtype": record.dtype, "route": route.kind, "source": route.source,
                 "calls": record.calls,
                 "modules": [{"module": name, "calls": n} for name, n in record.modules.items()]}
                for record, route in zip(records, routes, strict=True)],
    }


def _notes(desc: Any, records: list[OpRecord], *, train: bool, amp: bool, fused: bool,
           math_attention: bool) -> list[str]:
    notes = [
        "Traced on fake CPU tensors (no data, no compute): where a device chooses a device-specific "
        "kernel at run time (SDPA's fused attention, cuDNN convolution and batch norm) the trace "
        "shows the CPU's choice, so the op names of those calls can differ on the real device.",
        "Ops are counted below autograd, as a backend sees them: CompositeImplicitAutograd ops "
        "appear as the ops they decompose into.",
    ]
    attention = _attention_note(desc, records, fused=fused, math_attention=math_attention)
    if attention:
        notes.append(attention)
    if train:
        notes.append("The training step is one forward pass, the loss, one backward pass and one "
                     "AdamW step with foreach=False (per-parameter ops); optimizer calls are listed "
                     f"under {OPTIMIZER}, the loss and the top-level module's own code under {MODEL}.")
    if amp:
        notes.append(f"AMP: the forward pass and the loss ran under torch.autocast('cpu', "
                     f"dtype={desc.autocast_dtype}) ({desc.autocast_dtype} is precision.autocast_dtype "
                     f"of '{desc.name}'); the CPU's autocast op lists decided which ops ran in "
                     f"{desc.autocast_dtype}, and '{desc.name}''s lists may differ.")
    if desc.native_source == "probe" and desc.dispatch_key != "CPU":
        notes.append(f"'{desc.name}' takes its native op set from probing the {desc.dispatch_key} "
                     f"dispatch key of this process; without its plugin loaded that set is incomplete "
                     f"and ops show as not native.")
    return notes


def _attention_note(desc: Any, records: list[OpRecord], *, fused: bool, math_attention: bool) -> str:
    sdpa = sorted({r.op for r in records if r.op.startswith(_SDPA_PREFIX)})
    # scaled_dot_product_attention itself is CompositeImplicitAutograd, so no dispatch mode sees the
    # call; its kernels (_scaled_dot_product_*) or, on the math path, _safe_softmax (which only SDPA's
    # math path calls) show that it ran.
    if not sdpa and not any(r.op == "aten::_safe_softmax.default" for r in records):
        return ""
    if not fused:
        return (f"'{desc.name}' sets ops.fused_attention = false: scaled_dot_product_attention was traced "
                f"on its math path (bmm, softmax), as torch-fl runs it there.")
    if math_attention:
        kernels = sorted(op for op in desc.native_ops()
                         if op.startswith(_SDPA_PREFIX) and op.endswith(".default")
                         and not op.endswith(("_backward.default", "_math.default")))
        return ("scaled_dot_product_attention was traced on its math path (bmm, softmax), which every "
                f"device can run: at run time PyTorch picks a fused kernel of '{desc.name}' when one fits "
                f"the inputs" + (f" (native here: {', '.join(kernels)})." if kernels else "."))
    return (f"scaled_dot_product_attention ran as {', '.join(sdpa)}, the kernel PyTorch picks on the CPU "
            f"for these inputs.")


def _report(spec: ModelSpec, device: str, data: dict[str, Any], traced: str) -> Report:
    summary = data["summary"]
    name = data["device"] if data["device"] == device.removeprefix("emu:") else f"{data['device']} ({device})"
    routes_text = ", ".join(f"{kind} {n}" for kind, n in summary["routes"].items() if n)
    report = Report(
        title=f"Operator coverage of {spec.name} on {name}",
        data=data,
        summary=[
            ("model", spec.name),
            ("device", name),
            ("traced", traced),
            ("ops", f"{summary['ops']} distinct (op, dtype) pairs, {summary['calls']} calls"),
            ("native", f"{summary['native_ops_share']:.1%} of ops, {summary['native_calls_share']:.1%} "
                       f"of calls"),
            ("calls per route", routes_text or "none"),
        ],
    )
    report.sections.append(_not_native_section(data))
    report.sections.append(_module_section(spec, data))
    report.sections.append(Section("Notes", text=[f"- {note}" for note in data["notes"]]))
    report.warnings.extend(_warnings(data))
    return report


def _not_native_section(data: dict[str, Any]) -> Section:
    ops = [op for op in data["ops"] if op["route"] != "native"]
    section = Section(f"Ops that are not native on {data['device']}")
    if not ops:
        section.text.append(f"Every traced op is native on {data['device']}.")
        return section
    ops.sort(key=lambda op: (_SEVERITY.index(op["route"]), -op["calls"], op["op"]))
    rows = [[op["route"], op["op"], op["dtype"] or "-", op["calls"],
             ", ".join(f"{m['module']} ×{m['calls']}" for m in op["modules"][:3])
             + (f", +{len(op['modules']) - 3} more" if len(op["modules"]) > 3 else ""),
             _short_source(op["source"], data["device"])]
            for op in ops]
    section.tables.append(Table(["route", "op", "dtype", "calls", "called by", "decided by"], rows))
    return section


def _short_source(source: str, device: str) -> str:
    """The setting without the description's path, which the JSON keeps and a terminal cannot fit."""
    prefix = f"description '{device}' ("
    if source.startswith(prefix) and ") " in source:
        return source.split(") ", 1)[1]
    return source


def _top_level(module: str) -> str:
    return module if module.startswith("<") else module.split(".", 1)[0]


def _module_section(spec: ModelSpec, data: dict[str, Any]) -> Section:
    per_module: dict[str, Counter[str]] = defaultdict(Counter)
    for op in data["ops"]:
        for caller in op["modules"]:
            per_module[_top_level(caller["module"])][op["route"]] += caller["calls"]
    order = [name for name, _ in spec.model.named_children()] + [MODEL, OPTIMIZER]
    modules = [m for m in order if m in per_module] + sorted(set(per_module) - set(order))
    used = [kind for kind in ROUTES if any(per_module[m][kind] for m in modules)]
    rows = [[m, sum(per_module[m].values()), *(per_module[m][kind] for kind in used)] for m in modules]
    chart = Chart("stacked-bar", "Calls per route, by top-level module", x=modules,
                  series=[{"name": kind, "values": [per_module[m][kind] for m in modules]} for kind in used],
                  x_label="module", y_label="calls")
    return Section("Routes per module", tables=[Table(["module", "calls", *used], rows)], charts=[chart])


def _warnings(data: dict[str, Any]) -> list[str]:
    warnings = []
    share = data["summary"]["native_calls_share"]
    if share < NATIVE_CALLS_WARNING:
        warnings.append(f"only {share:.1%} of calls are native on {data['device']} (below "
                        f"{NATIVE_CALLS_WARNING:.0%}): expect translation and fallback overhead; the "
                        f"ops table above lists what to add to the description or provide kernels for.")
    unsupported = [op for op in data["ops"] if op["route"] == "unsupported"]
    if unsupported:
        names = ", ".join(f"{op['op']} ({op['dtype'] or 'any dtype'})" for op in unsupported[:5])
        more = f" and {len(unsupported) - 5} more" if len(unsupported) > 5 else ""
        count = ("1 (op, dtype) pair has" if len(unsupported) == 1
                 else f"{len(unsupported)} (op, dtype) pairs have")
        warnings.append(f"{count} no route on {data['device']} and would raise UnsupportedOperatorError: "
                        f"{names}{more}.")
    return warnings
