"""Operator coverage of a model on a device: the route every traced (op, dtype) takes there.

The model is traced without compute (trace.py), so any described device can be checked from any
machine: ``cuda``, ``mps``, ``emu:minimal``, ``cpu``, a vendor's .toml. The trace routes every call with
the router's own route table (torch_fl.routing.table) and runs translations as the router does, so a
translated op expands into the ops its translation calls, each with its own route (chains.py): the
verdict of a translated op is the worst route in its chain, and ``--strict`` fails when any call, at any
depth, has no route. Where PyTorch picks kernels by backend (attention, oneDNN, dropout) the trace makes
the device's choice (fidelity.py). When fake tensors meet Python code that branches on values, the step
is recorded from a real CPU run of the example inputs instead, and the report says so.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from .._names import EMULATION_PREFIX, ROUTE_SEVERITY, ROUTES, RouteKind
from ..device import ResolvedDevice
from ..report import Chart, Report, Section, Table, progress, stage
from ..routing import route_table
from ..routing.emu.slot import backend_name
from ..routing.table import RouteTable
from .fidelity import CUDA_AUTOCAST_BACKENDS, DeviceKernels, device_kernels
from .model import ModelSpec
from .ops_bench import native_but_slow
from .trace import MODEL, OPTIMIZER, OpRecord, TraceResult, trace_step

NATIVE_CALLS_WARNING = 0.8  # below this native share of calls a model is far from ready
# The order in which non-native routes are listed: what stops a run first, what is slow next.
_SDPA_PREFIX = "aten::_scaled_dot_product_"


def coverage(spec: ModelSpec, device: str | ResolvedDevice, train: bool = False, amp: bool = False,
             plugin_version: str | None = None) -> Report:
    """Trace `spec` and classify every (op, dtype) it calls with the route table of `device`.

    Args:
        spec: the model (``torch_fl.analysis.model.load_model``).
        device: a description name (``cuda``, ``mps``, ``cpu``), ``emu:NAME``, a description .toml path, or
            a ResolvedDevice (``torch_fl.device.resolve_spec``; torchfl grade passes the one it resolved).
        train: trace a training step (forward, loss, backward, one AdamW step) instead of inference.
        amp: run the forward pass under autocast with the description's ``precision.autocast_dtype``.
        plugin_version: for a chip with a vendor op table (npu, mlu, musa, xpu), answer for that plugin
            release line ('2.5') instead of the installed one or the newest; the report lists the traced
            ops whose registration differs between lines ('native from 2.7').

    Returns:
        A Report whose ``data`` is the documented JSON (docs/analysis.md, "torchfl coverage").

    Example:
        >>> from torch_fl.analysis.model import load_model
        >>> spec = load_model("examples/gpt.py:factory")  # doctest: +SKIP
        >>> report = coverage(spec, "emu:minimal", train=True)  # doctest: +SKIP
        >>> report.data["summary"]["unsupported_calls"]  # doctest: +SKIP
        0
    """
    if isinstance(device, ResolvedDevice):  # resolved once by the caller: its description, as it is
        emulated, table, device = device.emulated, route_table(device.description), device.spec
    else:
        emulated = _emulated(device)
        # The description alone: resolving emu:NAME as a device would register the emulated backend.
        table = route_table(device.removeprefix(EMULATION_PREFIX))
    if plugin_version is not None:
        table = _for_plugin_version(table, plugin_version)
    desc = table.description
    kernels = device_kernels(desc, emulated=emulated)
    what = "a training step (forward, loss, backward, AdamW step)" if train else "a forward pass"
    device_tensors = trace_device(kernels, amp, desc)
    with stage(f"tracing {what} of {spec.name} on fake tensors with the routes of '{desc.name}'"
               + (f" under autocast({desc.autocast_dtype})" if amp else ""), unit="op calls") as traced_calls:
        result = trace_step(spec, train=train, amp=amp, amp_dtype=desc.autocast_dtype, table=table,
                            kernels=kernels, device=device_tensors, real_fallback=True, stage=traced_calls)
    if result.real_run:
        progress(f"fake tensors could not follow the model ({result.real_run}); recorded a real CPU run "
                 f"of the example inputs instead")
    data = _data(spec, desc.name, result)
    data["on_cpu"] = _on_cpu(table, result.records)
    data["summary"]["on_cpu_calls"] = data["on_cpu"]["calls"]
    data["notes"] = _notes(table, result, kernels, device_tensors, train=train, amp=amp)
    plugin = _plugin_data(desc, result.records)
    if plugin is not None:
        data["plugin"] = plugin
    slow = native_but_slow(data, desc)  # [ops.slow] of a torchfl ops-bench overlay
    traced = what + (f" under autocast({desc.autocast_dtype})" if amp else "")
    traced += ", recorded from a real CPU run" if result.real_run else ", on fake tensors"
    report = _report(spec, device, data, traced)
    if slow is not None:
        report.sections.insert(1, slow)
        report.summary.append(("native but slow", f"{_n(data['summary']['native_slow_calls'], 'call')} "
                                                  f"(ops-bench found a faster alternative)"))
    return report


def _for_plugin_version(table: RouteTable, version: str) -> RouteTable:
    """The route table of `table`'s chip answering for plugin release line `version`."""
    from ..description import registry
    from ..errors import DescriptionError

    desc = table.description.with_plugin_version(version)
    if desc.table_path() is None or desc.native_table() is None:
        with_tables = sorted(name for name, d in registry.descriptions().items() if d.table_path() is not None)
        raise DescriptionError(
            f"--plugin-version {version}: '{desc.name}' has no vendor op table (ops.table), so there are no "
            f"plugin versions to answer for; chips with one: {', '.join(with_tables)}", path=desc.path,
            key="ops.table")
    return RouteTable(desc, table.kernels)


def _plugin_data(desc: Any, records: list[OpRecord]) -> dict[str, Any] | None:
    """What a vendor chip's native set is based on, and the traced ops whose registration differs
    between the table's plugin release lines (None: the set is probed or listed, not a table)."""
    resolved = desc.native_table()
    if resolved is None:
        return None
    from ..description.probe import composite_ops, structured_delegates

    table, version, why = resolved
    changes = table.changes(version)
    delegates = structured_delegates()
    composite = composite_ops()  # native in every line whatever the vendor registers
    native = {v: table.ops(v) for v in table.versions}  # each line's registered ops, read once
    rows = []
    for op in sorted({r.op for r in records} - composite):
        delegate = delegates.get(op)
        if delegate is None:
            if op in changes:
                rows.append({"op": op, "change": changes[op]})
        elif op in changes or delegate in changes:
            change = _through_delegate(table, native, version, op, delegate)
            if change:
                rows.append({"op": op, "change": change})
    return {"table": table.path, "plugin": table.plugin, "version": version, "why": why,
            "sources": table.sources(), "changes": rows}


def _through_delegate(table: Any, native: dict[str, frozenset[str]], version: str | None, op: str,
                      delegate: str) -> str | None:
    """How a structured `op` varies across the table's lines: it runs natively where it is registered
    itself or where its out= overload (`delegate`) is, so its own row alone would say 'not in 2.14' of a
    line that runs it through the delegate (issue 42). None: native in every line."""
    own = {v for v, ops in native.items() if op in ops}
    through = {v for v, ops in native.items() if delegate in ops} - own
    lines = own | through
    if lines == set(native):
        return None
    spans = table._spans  # the table's own wording of a set of release lines
    missing = "" if version is None or version in lines else f" (not in {version})"
    parts = ([f"itself in {spans(own)}"] if own else []) + ([f"through {delegate} in {spans(through)}"]
                                                            if through else [])
    return f"native in {spans(lines)}{missing}: " + "; ".join(parts) if parts else f"not native{missing}"


def _emulated(device: str) -> bool:
    """Whether `device` is an emulated chip: emu:NAME, or a virtual id mapped to one (FL_DEVICE=emu:NAME
    makes acc0 the emulated chip)."""
    if device.startswith(EMULATION_PREFIX):
        return True
    from ..device import resolve_spec

    try:
        return resolve_spec(device).emulated
    except Exception:  # a description name or file rather than a device: not emulated
        return False


def trace_device(kernels: DeviceKernels, amp: bool, desc: Any = None) -> str:
    """Where the trace puts the model's tensors: the host's CPU; for a plugin chip (npu, mlu, musa) the
    emulated backend under the chip's own device type, emulated or not, so that code which branches on
    ``x.device.type == "npu"`` (a vendor's fused op, transformers' npu paths) takes the chip's branch and
    PyTorch makes a PrivateUse1 backend's kernel choices, as the plugin's are; the emulated backend
    itself for another emulated chip (PyTorch makes its kernel choices, autocast's included, exactly as
    under emulation) and for AMP on a backend with CUDA's autocast lists (which the emulated backend
    registers); else meta (a device apart from the host, its choices steered by fidelity.py). Autocast
    has no meta backend, so any other AMP trace stays on the CPU, its device tensors tracked."""
    if kernels.host:
        return "cpu"
    own = _own_type_device(desc)
    if own:
        return own
    if kernels.emulated or (amp and kernels.backend in CUDA_AUTOCAST_BACKENDS):
        emulated = _emulated_device(desc)
        if emulated:
            return emulated
    return "cpu" if amp else "meta"


def _own_type_device(desc: Any) -> str | None:
    """A device of the emulated backend named as plugin chip `desc` ('npu:0'), or None: `desc` is not a
    plugin chip, its real plugin is installed (its slot, not ours to name), or this process's PrivateUse1
    slot already has another name (it is named once per process; `own_type_missed` says so)."""
    from ..routing.emu import vendor

    if desc is None or vendor.emulated_name(desc) == vendor.EMU:
        return None
    from ..device import _plugin_installed

    if desc.plugin and _plugin_installed(desc.plugin):
        return None
    device = _emulated_device(desc)
    return device if device and device.split(":")[0] == desc.device_type else None


def own_type_missed(desc: Any, device_tensors: str) -> bool:
    """Whether plugin chip `desc` was traced on tensors of another device type than its own."""
    from ..routing.emu import vendor

    return (desc is not None and vendor.emulated_name(desc) != vendor.EMU
            and device_tensors.split(":")[0] not in (desc.device_type, "cpu"))


def _emulated_device(desc: Any = None) -> str | None:
    try:
        from ..device import emulated_devices
    except ImportError:  # a torch-fl without the emulated backend
        return None
    # (the first registration of the process names the slot after the chip: npu:0 for npu)
    devices = emulated_devices(create=True, chip=desc)
    return str(devices[0]) if devices else None


def _verdicts(records: list[OpRecord]) -> dict[tuple[tuple[str, str | None], ...], str]:
    """The worst route in the chain below each translated call, keyed by its chain (via + op)."""
    worst: dict[tuple[tuple[str, str | None], ...], str] = {}
    for record in records:
        route = record.route or "native"
        for depth in range(len(record.via)):
            chain = record.via[:depth + 1]
            if ROUTE_SEVERITY.index(route) < ROUTE_SEVERITY.index(worst.get(chain, RouteKind.NATIVE)):
                worst[chain] = route
    return worst


def _data(spec: ModelSpec, device: str, result: TraceResult) -> dict[str, Any]:
    records = result.records
    top = [r for r in records if not r.via]
    calls = sum(r.calls for r in top)
    per_route = dict.fromkeys(ROUTES, 0)
    reached = dict.fromkeys(ROUTES, 0)
    for record in records:
        (reached if record.via else per_route)[record.route or "native"] += record.calls
    native_ops = sum(r.route == RouteKind.NATIVE for r in top)
    verdicts = _verdicts(records)
    unsupported_calls = per_route["unsupported"] + reached["unsupported"]
    return {
        "device": device,
        "model": spec.name,
        "summary": {
            "native_ops_share": native_ops / len(top) if top else 1.0,
            "native_calls_share": per_route["native"] / calls if calls else 1.0,
            "ops": len(top),
            "calls": calls,
            "routes": per_route,
            "in_translations": reached,
            "unsupported_calls": unsupported_calls,
            "traced_on": "real CPU run" if result.real_run else "fake tensors",
        },
        "ops": [{"op": r.op, "dtype": r.dtype, "route": r.route, "source": r.source, "calls": r.calls,
                 "via": [{"op": op, "dtype": dtype} for op, dtype in r.via],
                 "verdict": verdicts.get((*r.via, (r.op, r.dtype)), r.route)
                 if r.route in (RouteKind.TRANSLATE, RouteKind.KERNEL) else r.route,
                 "modules": [{"module": name, "calls": n} for name, n in r.modules.items()]}
                for r in records],
        "real_run": result.real_run or None,
    }


def _on_cpu(table: RouteTable, records: list[OpRecord]) -> dict[str, Any]:
    """The calls that run on the CPU on the real chip (route fallback, at any depth), who runs them
    there (the vendor's own CPU fallback, or torch-fl's), and what they copy."""
    ops = []
    for r in records:
        if r.route != RouteKind.FALLBACK:
            continue
        ops.append({"op": r.op, "dtype": r.dtype, "calls": r.calls, "source": r.source,
                    "by": "vendor" if table.route(r.op, r.dtype).vendor else "torch-fl",
                    "via": [{"op": op, "dtype": dtype} for op, dtype in r.via],
                    "bytes_per_call": r.copied_bytes // r.calls if r.calls else 0, "bytes": r.copied_bytes})
    ops.sort(key=lambda o: (-o["bytes"], -o["calls"], o["op"]))
    vendor = table.vendor_fallback
    return {"calls": sum(o["calls"] for o in ops), "bytes": sum(o["bytes"] for o in ops),
            "vendor_fallback": vendor.on, "vendor_setting": vendor.setting(), "ops": ops,
            "cost": "each call copies its device inputs to the host and its results back (in-place and "
                    "out= arguments are written back into the originals): the bytes shown, computed from the "
                    "traced shapes and dtypes; plus a device sync per call and the CPU kernel's own time, "
                    "which the trace does not measure."}


def _notes(table: RouteTable, result: TraceResult, kernels: DeviceKernels, device_tensors: str, *,
           train: bool, amp: bool) -> list[str]:
    desc = table.description
    records = result.records
    if result.real_run:
        notes = [f"Recorded from a real CPU run of the example inputs, not on fake tensors: {result.real_run}. "
                 f"Every part of the step (forward, loss, backward, optimizer) comes from that run; its "
                 f"ops are those of these inputs, routed and translated as the router does."]
    else:
        where = {"cpu": "CPU tensors", "meta": "meta tensors (the device's; host tensors stay on the CPU)"}
        notes = [f"Traced on fake {where.get(device_tensors.split(':')[0], device_tensors + ' tensors')} "
                 f"(no data, no compute) for every part of the step; the router's decisions were replayed "
                 f"on them (translations ran, their ops are listed with the op they were reached through)."]
    if device_tensors != "cpu" or not kernels.host:
        notes.append("Only device work is counted: host tensors (an optimizer's step counter, inputs "
                     "sampled on the CPU) are not the chip's, as under emulation.")
    notes.append("Ops are counted below autograd, as a backend sees them: CompositeImplicitAutograd ops "
                 "appear as the ops they decompose into.")
    if any(r.via for r in records):
        notes.append("A translated op runs PyTorch's decomposition, whose ops the device must run too: "
                     "they are listed with 'via' (the translated ops they were reached through, outermost "
                     "first), and a translated op's verdict is the worst route in its chain.")
    attention = _attention_note(desc, records, kernels)
    if attention:
        notes.append(attention)
    on_emu = device_tensors.split(":")[0] == backend_name()  # tensors of the emulated backend
    if kernels.emulated and not on_emu:  # the emu device is unavailable
        notes.append("The emulated device could not be registered in this process (a backward pass ran "
                     "before it, or a vendor plugin owns PrivateUse1; torch-fl logged why), so the trace "
                     "used meta tensors: choices PyTorch makes in C++ for the emulated backend (dropout "
                     "inside attention and LSTMs, fused LSTM cells) can differ from the emulator's. "
                     "`torchfl coverage` in a fresh process gives the exact answer.")
    if kernels.emulated:
        from ..routing.reference import host_can_run

        cpu_less = sorted({r.op for r in records if r.route == RouteKind.NATIVE and r.op.startswith("aten::")
                           and not host_can_run(r.op)})
        if cpu_less:
            notes.append(f"Native on '{desc.name}', but the host has no kernel or reference math to emulate "
                         f"them with: {', '.join(cpu_less)}. The chip runs them; an emulated run stops there.")
    if own_type_missed(desc, device_tensors):
        notes.append(f"'{desc.name}' is a plugin chip (device type '{desc.device_type}'), but this process's "
                     f"PrivateUse1 slot already has another name ('{backend_name()}') or {desc.plugin} is "
                     f"installed, so the trace ran on {device_tensors.split(':')[0]} tensors: code that "
                     f"branches on x.device.type == '{desc.device_type}' took its other branch. `torchfl "
                     f"coverage` in a fresh process (or FL_DEVICE=emu:{desc.name}) traces on the chip's own type.")
    own_type = on_emu and desc.device_type == backend_name() and not kernels.emulated
    if own_type:
        notes.append(f"The model's tensors were tensors of the device type '{desc.device_type}' (the emulated "
                     f"backend under the chip's own name, no data), so code that branches on the device type "
                     f"takes the chip's branch and PyTorch made a PrivateUse1 backend's kernel choices, as "
                     f"for {desc.plugin}; attention and dropout were steered to '{desc.name}''s kernels.")
    elif on_emu and kernels.emulated:
        notes.append(f"The model's tensors were tensors of the emulated backend ({device_tensors}), so "
                     f"PyTorch made that backend's kernel choices (fused dropout and LSTM cells, no "
                     f"oneDNN or *_for_cpu kernels) exactly as under emulation; SDPA was recorded as the "
                     f"emulated device runs it (routing/emu/attention.py).")
    elif on_emu:
        notes.append(f"For its autocast lists the model's tensors were tensors of the emulated backend "
                     f"({device_tensors}), with attention and dropout steered to '{desc.name}''s kernels: "
                     f"no oneDNN or *_for_cpu kernels, LSTM cells as _thnn_fused_lstm_cell (a GPU with "
                     f"cuDNN runs _cudnn_rnn instead).")
    elif not kernels.host:
        notes.append(f"'{desc.name}' is not the host CPU: the trace ran without the CPU's own kernels "
                     f"(oneDNN's mkldnn_*, *_for_cpu), so RNNs appear as the generic cell ops"
                     + (" and training-mode dropout as native_dropout" if kernels.fused_dropout else "")
                     + f", as PyTorch runs them on a {kernels.backend} backend. Dropout and RNN cells inside "
                     f"PyTorch's C++ code (nn.LSTM's inter-layer dropout) still take the generic path, "
                     f"and the device's own fused RNN kernels (cuDNN, _lstm_mps) are not shown.")
    if train:
        notes.append("The training step is one forward pass, the loss, one backward pass and one "
                     "AdamW step with foreach=False (per-parameter ops); optimizer calls are listed "
                     f"under {OPTIMIZER}, the loss and the top-level module's own code under {MODEL}.")
    if amp:
        backend = device_tensors.split(":")[0]
        lists = ("the emulated device's autocast op lists (PyTorch's CUDA lists, as under emulation)"
                 if on_emu and kernels.emulated else
                 "PyTorch's CUDA autocast op lists (registered by the emulated backend)" if on_emu
                 else "the CPU's autocast op lists")
        notes.append(f"AMP: the forward pass and the loss ran under torch.autocast('{backend}', "
                     f"dtype={desc.autocast_dtype}) ({desc.autocast_dtype} is precision.autocast_dtype "
                     f"of '{desc.name}'); {lists} decided which ops ran in {desc.autocast_dtype}"
                     + ("." if on_emu else f", and '{desc.name}''s lists may differ."))
    resolved = desc.native_table()
    if resolved is not None:
        vendor_table, version, why = resolved
        notes.append(f"'{desc.name}''s native op set comes from its vendor op table {vendor_table.path}, "
                     f"{vendor_table.plugin} {version or '(one release line)'} ({why}): the ops the vendor "
                     f"registers in that line, from {'; '.join(vendor_table.sources())}, plus the ops whose "
                     f"composite kernels decompose onto them. `--plugin-version` answers for another line.")
    elif desc.native_source == "probe" and desc.dispatch_key != "CPU":
        notes.append(f"'{desc.name}''s native op set was probed from this process's {desc.dispatch_key} "
                     f"dispatch key, where its plugin ({desc.plugin or 'built into torch'}) is loaded.")
    return notes


def _attention_note(desc: Any, records: list[OpRecord], kernels: DeviceKernels) -> str:
    sdpa = sorted({r.op for r in records if r.op.startswith(_SDPA_PREFIX)})
    # scaled_dot_product_attention itself is CompositeImplicitAutograd, so no dispatch mode sees the
    # call; its kernels (_scaled_dot_product_*) or, on the math path, _safe_softmax (which only SDPA's
    # math path calls) show that it ran.
    if not sdpa and not any(r.op == "aten::_safe_softmax.default" for r in records):
        return ""
    if not desc.section("ops")["fused_attention"]:
        return (f"'{desc.name}' sets ops.fused_attention = false: scaled_dot_product_attention was traced "
                f"on its math path (bmm, softmax), as torch-fl runs it there.")
    if kernels.host:
        return (f"scaled_dot_product_attention ran as {', '.join(sdpa)}, the kernel PyTorch picks on the "
                f"CPU for these inputs.")
    fused = sorted(op for op in desc.native_ops() if op.startswith(_SDPA_PREFIX) and op.endswith(".default")
                   and not op.endswith(("_backward.default", "_math.default")))
    if kernels.attention:
        recorded = [k.op for k in kernels.attention if k.op in sdpa]
        emulated = (" The emulated device runs the same kernel, computed by the host's fused kernel (with "
                    "dropout or a mask that needs its gradient it takes the math path, and so does this trace)."
                    if kernels.emulated else "")
        return ("scaled_dot_product_attention was recorded as the fused kernel PyTorch picks on "
                f"'{desc.name}' for these inputs ({', '.join(recorded) or 'none fitted: math path'}); "
                f"its order of preference: {', '.join(k.op for k in kernels.attention)}, else the math "
                f"path.{emulated}")
    how = "as the emulator computes it on the CPU" if kernels.emulated else "no fused kernel of it is native"
    return (f"scaled_dot_product_attention was traced on its math path (bmm, softmax), {how}; the chip "
            f"itself picks a fused kernel of '{desc.name}' when one fits "
            f"the inputs" + (f" (native here: {', '.join(fused)})." if fused else "."))


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
            ("inside translations", ", ".join(f"{kind} {n}" for kind, n in summary["in_translations"].items()
                                              if n) or "none"),
            ("unsupported calls", f"{summary['unsupported_calls']} (any depth; --strict fails above 0)"),
            ("on the CPU", f"{_n(data['on_cpu']['calls'], 'call')} (any depth) run on the CPU on the real chip, "
                           f"copying {_bytes(data['on_cpu']['bytes'])}"),
        ],
    )
    report.sections.append(_not_native_section(data))
    if data["on_cpu"]["ops"] or data["on_cpu"]["vendor_fallback"]:
        report.sections.append(_on_cpu_section(data))
    if "plugin" in data:
        report.sections.append(_plugin_section(data))
    report.sections.append(_module_section(spec, data))
    report.sections.append(Section("Notes", text=[f"- {note}" for note in data["notes"]]))
    report.warnings.extend(_warnings(data))
    return report


def _not_native_section(data: dict[str, Any]) -> Section:
    ops = [op for op in data["ops"] if op["route"] != RouteKind.NATIVE or op["verdict"] != RouteKind.NATIVE]
    section = Section(f"Ops that are not native on {data['device']}")
    if not ops:
        section.text.append(f"Every traced op is native on {data['device']}.")
        return section
    ops.sort(key=lambda op: (ROUTE_SEVERITY.index(op["verdict"]), ROUTE_SEVERITY.index(op["route"]), -op["calls"],
                             op["op"], _via_text(op["via"])))
    rows = [[op["route"] if op["verdict"] == op["route"] else f"{op['route']} -> {op['verdict']}",
             op["op"], op["dtype"] or "-", op["calls"],
             _via_text(op["via"]) or "-",
             ", ".join(f"{m['module']} ×{m['calls']}" for m in op["modules"][:3])
             + (f", +{len(op['modules']) - 3} more" if len(op["modules"]) > 3 else ""),
             _short_source(op["source"], data["device"])]
            for op in ops]
    section.tables.append(Table(["route", "op", "dtype", "calls", "via translation of", "called by",
                                 "decided by"], rows))
    section.text.append("'translate -> X': the translation runs, but the worst route in its chain is X. "
                        "Rows with 'via' are reached inside translations (outermost first).")
    return section


def _n(count: int, what: str) -> str:
    return f"{count} {what}" + ("" if count == 1 else "s")


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _on_cpu_section(data: dict[str, Any]) -> Section:
    on_cpu = data["on_cpu"]
    section = Section(f"Runs on the CPU on the real chip ({data['device']})")
    if not on_cpu["ops"]:
        section.text.append(f"No traced call runs on the CPU on {data['device']} ({on_cpu['vendor_setting']}).")
        return section
    rows = [[op["op"], op["dtype"] or "-", op["calls"], _bytes(op["bytes_per_call"]), _bytes(op["bytes"]),
             "the vendor's stack" if op["by"] == "vendor" else "torch-fl", _via_text(op["via"]) or "-",
             _short_source(op["source"], data["device"])] for op in on_cpu["ops"]]
    section.tables.append(Table(["op", "dtype", "calls", "copied per call", "copied in all", "falls back",
                                 "via translation of", "decided by"], rows))
    vendor = sum(op["calls"] for op in on_cpu["ops"] if op["by"] == "vendor")
    section.text.append(f"{_n(on_cpu['calls'], 'call')} of {_n(len(on_cpu['ops']), '(op, dtype) pair')} copy "
                        f"their tensors to the host and back ({_bytes(on_cpu['bytes'])} in all); {vendor} of them "
                        f"the vendor's own CPU fallback makes, without an error ({on_cpu['vendor_setting']}). "
                        f"The cost: {on_cpu['cost']}")
    return section


def _plugin_section(data: dict[str, Any]) -> Section:
    plugin = data["plugin"]
    line = f"{plugin['plugin']} {plugin['version']}" if plugin["version"] else plugin["plugin"]
    section = Section(f"Plugin versions ({line}: {plugin['why']})")
    if not plugin["changes"]:
        section.text.append(f"Every traced op runs natively in the same release lines of {plugin['table']} "
                            "(registered itself or through its out= overload).")
        return section
    routes = {}
    for op in data["ops"]:
        routes.setdefault(op["op"], op["route"])
    section.tables.append(Table(["op", f"route with {line}", "across plugin versions"],
                                [[c["op"], routes.get(c["op"], "-"), c["change"]] for c in plugin["changes"]]))
    return section


def _via_text(via: list[dict[str, Any]]) -> str:
    return " > ".join(link["op"].removeprefix("aten::").removesuffix(".default") for link in via)


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
        if op["via"]:
            continue  # counted in the translated op the model called
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
                        f"table 'Ops that are not native on {data['device']}' lists what to add to the "
                        f"description or provide kernels for.")
    vendor = [op for op in data["on_cpu"]["ops"] if op["by"] == "vendor"]
    if vendor:
        names = ", ".join(op["op"] for op in vendor[:5]) + (f" and {len(vendor) - 5} more" if len(vendor) > 5 else "")
        warnings.append(f"{_n(sum(op['calls'] for op in vendor), 'call')} of {_n(len(vendor), '(op, dtype) pair')} "
                        f"run on the CPU on the real {data['device']}, silently but for the vendor's warning: its stack has "
                        f"no kernel for {names} and falls back to the CPU itself (see 'Runs on the CPU on the "
                        f"real chip').")
    unsupported = [op for op in data["ops"] if op["route"] == RouteKind.UNSUPPORTED]
    if unsupported:
        names = ", ".join(f"{op['op']} ({op['dtype'] or 'any dtype'})"
                          + (f" reached via {_via_text(op['via'])}" if op["via"] else "")
                          for op in unsupported[:5])
        more = f" and {len(unsupported) - 5} more" if len(unsupported) > 5 else ""
        count = ("1 (op, dtype) pair has" if len(unsupported) == 1
                 else f"{len(unsupported)} (op, dtype) pairs have")
        warnings.append(f"{count} no route on {data['device']} and would raise UnsupportedOperatorError: "
                        f"{names}{more}.")
    return warnings
