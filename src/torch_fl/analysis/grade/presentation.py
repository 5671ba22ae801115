"""grade's presentation of its measurements: the JSON data, the text and HTML sections, and the warnings."""

from __future__ import annotations

from typing import Any

from ...report import Chart, Report, Section, Table
from ..bench import LEAK_RULE, NOISY, load_text
from ..bench import TARGET as ALIGNMENT_TARGET
from ..host_syncs import syncs_line, syncs_section
from .levels import (
    FAIL,
    INCONCLUSIVE,
    LEVEL_MEANING,
    LEVEL_TITLE,
    LEVELS,
    NATIVE_SHARE_TARGET,
    NOT_MEASURED,
    PASS,
    SCALING_DEVICES,
    SCALING_TARGET,
    SOURCE,
    STATUSES,
    Criterion,
    achieved_level,
    claim_check,
    noisy_modes,
    settle_command,
    steps_to_settle,
    unmeasurable,
)
from .runs import PRECISION_DTYPE, Measurements, Target


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
    confirmed, claim_text = claim_check(claimed, level, rows)
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
    """The level and what it rests on: the next level's criteria that did not pass, and, where none of
    them failed, that the level is a lower bound resting on measurements that could not decide."""
    text = data["level"] + (f" ({data['level_reason']})" if data["level_reason"] else "")
    reached = LEVELS.index(data["level"]) if data["level"] in LEVELS else -1
    if reached + 1 >= len(LEVELS):
        return text
    nxt = LEVELS[reached + 1]
    short = [r for r in data["criteria"] if r["level"] == nxt and r["status"] != PASS]
    if short and not any(r["status"] == FAIL for r in short):
        passed = sum(r["status"] == PASS for r in data["criteria"] if r["level"] == nxt)
        undecided = ", ".join(f"{r['name']} ({r['status']})" for r in short)
        text += (f"; a lower bound: nothing failed, {passed} of {passed + len(short)} {nxt} criteria passed and "
                 f"{nxt} rests on {undecided}")
    return text


def _render(data: dict[str, Any], target: Target, found: Measurements, claim_text: str) -> Report:
    rows = data["criteria"]
    counts = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
    summary = [
        ("model", data["model"]),
        ("device", _device_text(target)),
        ("reference", f"{data['reference']} (precision only)"),
        ("level", _level_text(data)),
        ("claimed", f"{data['claimed_level']} (level in description '{target.desc.name}'): {claim_text}"),
        ("criteria", f"{counts[PASS]} PASS, {counts[FAIL]} FAIL, {counts[INCONCLUSIVE]} INCONCLUSIVE, "
                     f"{counts[NOT_MEASURED]} NOT MEASURED (INCONCLUSIVE and NOT MEASURED never count as "
                     "PASS)"),
        ("thresholds", _thresholds_text(data["thresholds"])),
    ]
    syncs = (found.bench or {}).get("host_syncs")
    if syncs is not None:  # what serialises an asynchronous chip's step, by source line below
        summary.append(("host syncs", syncs_line(syncs)))
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
            f"steps (torchfl docs analysis, section \"torchfl grade\")")


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
        # "Ops that are not native on X:" heads coverage's table; without one its text says it all.
        lead = [ops.title + ":"] if ops.tables else []
        sections.append(Section("Routes (coverage --train)", text=[*lead, *ops.text],
                                tables=ops.tables, charts=[
            bar, *_chart(found.coverage_report, "stacked-bar", "Calls per route, by top-level module")]))
    if found.compare_report is not None:
        sections.append(Section("Precision per module (compare --train)", text=[
            f"{k}: {v}" for k, v in found.compare_report.summary[4:]],
            charts=_chart(found.compare_report, "line", "Max relative error per module")))
    if found.bench_report is not None:
        # Only bench's memory and host-sync rows: its alignment row would repeat an emulation's misleading ratio.
        sections.append(Section("Memory over steps (bench)", text=[
            f"{k}: {v}" for k, v in found.bench_report.summary if k in ("peak memory", "memory leak")],
            charts=_chart(found.bench_report, "line", "Memory after each step")))
        syncs = found.bench_report.data.get("host_syncs")
        if syncs is not None:
            sections.append(syncs_section(syncs, "Counted by bench in one more routed step after its warm-up"))
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


def _noise_warning(data: dict[str, Any], target: Target) -> list[str]:
    """The alignment's noise, when it matters: an INCONCLUSIVE alignment (the level is a lower bound until
    it is settled), or noisy step times behind a decided one."""
    alignment = next(r for r in data["criteria"] if r["id"] == "l1.alignment")
    bench = data["measurements"]["bench"]
    if alignment["status"] == INCONCLUSIVE and unmeasurable(bench):
        return [f"performance alignment is INCONCLUSIVE: load made it unmeasurable ({load_text(bench['load'])}); "
                f"it counts as not passed and {data['level']} is a lower bound. Rerun "
                f"`{settle_command(target, bench['steps'])}` on a quieter machine"]
    if alignment["status"] == INCONCLUSIVE:
        interval = bench["alignment_interval"]
        low, high = interval["low"], interval["high"]
        steps = steps_to_settle(interval["pairs"], alignment["measured"], low, high, ALIGNMENT_TARGET)
        spread = (f"its {interval['confidence']:.0%} interval {low:.3f}-{high:.3f} contains the threshold "
                  f"{ALIGNMENT_TARGET}" if low is not None else
                  f"{interval['pairs']} pairs are too few for an interval")
        return [f"performance alignment is INCONCLUSIVE ({alignment['measured']:.3f}; {spread}): machine "
                f"noise, not the model, would decide it, so it counts as not passed and {data['level']} is "
                f"a lower bound. Settle it with `{settle_command(target, steps)}`, on a quieter machine if "
                f"you can"]
    if alignment["status"] in (PASS, FAIL) and noisy_modes(bench):
        return [f"step times were noisy (p90 > {NOISY}x median), but the alignment's interval "
                f"{bench['alignment_interval']['low']:.3f}-{bench['alignment_interval']['high']:.3f} is clear "
                f"of {ALIGNMENT_TARGET}: its {alignment['status']} holds on a rerun"]
    return []


def _warnings(data: dict[str, Any], target: Target, counts: dict[str, int]) -> list[str]:
    warnings = _noise_warning(data, target)  # first: it says whether the level itself can be trusted
    if target.emulated:
        warnings.append(f"{target.device} is an emulated chip: performance alignment there would measure "
                        "the emulation (CPU + Python dispatch), not the chip, so it is NOT MEASURED and L1 "
                        "cannot be reached; coverage, L0 and precision are meaningful")
    warnings += _not_measured_warning(data, counts)
    if data["claim_confirmed"] is False:
        warnings.append(f"the description claims {data['claimed_level']}; this model measured "
                        f"{data['level']}")
    failed = [r for r in data["criteria"] if r["status"] == FAIL]
    if failed:
        warnings.append("failed: " + "; ".join(f"{r['level']} {r['name']}" for r in failed))
    return warnings
