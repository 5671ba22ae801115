"""torchfl doctor's text: the report's sections and rows from the facts `doctor.collect` gathered (the JSON is
those facts), the problems numbered with their next steps, and the device map as one line."""

from __future__ import annotations

import textwrap
from typing import Any

from ..description import registry
from ..report import Report, Section, render_text

_WRAP = 100


def map_text(mapping: dict[str, str]) -> str:
    return ", ".join(f"{virtual} -> {physical}" for virtual, physical in mapping.items()) or "empty"


# Rendering ----------------------------------------------------------------------------------------
def build_report(data: dict[str, Any], problems: list[str], notes: list[str]) -> Report:
    """The facts as sections of aligned 'key: value' fields, then the warnings and the verdict (a
    numbered list of problems, each with a next step); `data` is the report's JSON. torch_fl.report
    renders it, as it renders every command's report."""
    sections = [Section(title, fields=rows) for title, rows in _sections(data)]
    if data.get("bisect"):
        sections.append(Section("Environment bisect", text=[f"  {line}" for line in data["bisect"]["lines"]
                                                            or [data["bisect"]["verdict"]]]))
    if notes:
        sections.append(Section("Warnings", text=_numbered(notes)))
    sections.append(Section("Result", text=_verdict(problems)))
    return Report("torch-fl doctor", data, sections=sections)


def render_doctor_text(data: dict[str, Any], problems: list[str], notes: list[str]) -> str:
    """`build_report` as text (torch_fl.report.render_text)."""
    return render_text(build_report(data, problems, notes))


def _sections(data: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    desc, dev, visible = data["description"], data["device"], data["visible_devices"]
    return [
        ("Versions", [
            ("torch", data["torch_version"]), ("torch-fl", data["torch_fl_version"]),
            ("python", f"{data['python']['version']} ({data['python']['executable']})"),
            ("plugin", _plugin_text(data)), ("runtime", data["runtime_version"] or "(none reported)")]),
        ("Device", [
            ("requested", f"{dev['requested'] or '?'} (from {dev['source'] or '?'})"),
            ("device", dev["resolved"] or "(not resolved)"), ("name", data["device_name"] or "(unknown)"),
            ("type", data["device_type"] or "?"), ("vendor", data["vendor"] or "?"),
            ("backend", f"{data['backend']['name'] or '?'} ({data['backend']['source'] or 'not loaded'})"),
            ("device map", f"{map_text(data['device_map'])} ({data['device_map_source'] or 'not built'})"),
            ("visible devices", _visible_text(visible)),
            ("emulation", _emulation_text(data["emulation"]))]),
        ("Description", [
            ("name", desc["name"] or "?"), ("path", desc["path"] or "?"), ("sha256", desc["sha256"] or "?"),
            ("level", desc["level"] or "?"),
            *((f"compat {key}", _compat_text(c)) for key, c in desc["compat"].items()),
            *_release_rows(data["release_compat"])]),
        ("Routes", _route_rows(data)),
        ("Settings", [(item["name"], f"{item['value']} (from {item['source']}"
                       f"{'' if item['kind'] == 'environment' else ', ' + item['kind']})")
                      for item in data["settings"]] or [("settings", "(none set: every default)")]),
        *_plugin_sections(data),
        ("Platform", [("platform", data["platform"]), ("environment", data["environment"]),
                      ("cache dir", data["cache_dir"] or "?")]),
        ("Self-check", [("result", _check_text(data["self_check"])),
                        ("detail", data["self_check"]["detail"])]),
    ]


def _release_rows(found: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not found:
        return []
    if not found["known"]:
        return [("release facts", f"{found['plugin']} {found['plugin_version']}: not in {found['facts_path']}")]
    want = found["expected"]
    verdict = "ok" if found["ok"] else "MISMATCH"
    wants = f"torch {want['torch'] or '?'}, " if found["plugin"] != "torch" else ""  # torch's own build: no torch pin
    return [("release facts", f"{found['plugin']} {found['plugin_version']} wants {wants}"
             f"Python {', '.join(want['python']) or '?'}, {want['runtime_name']} {want['runtime'] or '?'} "
             f"({verdict}; {found['facts_path']})")]


def _plugin_sections(data: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    from .plugin_load import abi_text

    rows = []
    for entry in data["plugin_load"]:
        rows.append((entry["module"], _plugin_load_text(entry)))
        if entry["status"] != "ok":
            rows.append(("ABI", abi_text(entry["abi"])))
    return [("Plugin import (child process)", rows)] if rows else []


def _plugin_load_text(entry: dict[str, Any]) -> str:
    if entry["status"] == "ok":
        return f"ok in {entry['seconds']:.1f} s"
    how = {"signal": f"killed by {entry['signal']}", "timeout": f"no answer in {entry['seconds']:.0f} s",
           "exit": f"exit status {entry['returncode']}"}.get(entry["status"], entry["error_type"])
    return how + (f" (in {entry['extension']})" if entry["extension"] else "")


def _emulation_text(emulation: dict[str, Any]) -> str:
    if not emulation["emulator"]:
        return "(none)"
    how = "as a device" if emulation["emulator"] == "device" else f"under a {emulation['emulator']}"
    chip = emulation["chip"]
    text = f"'{chip or '?'}' emulated on the CPU {how}: {emulation['detail']}"
    from ..routing.emu.vendor import why_emu

    reason = why_emu(registry.get(chip)) if chip in registry.descriptions() else ""
    return text + (f" ({reason})" if reason and emulation["emulator"] == "device" else "")


def _route_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    routes = data["routes"]
    if not routes:
        return [("routes", "(not computed: the backend did not load)")]
    rows = [(route, str(n)) for route, n in routes.items()] + [
        ("default policy", f"ops.default = {data['route_default']} (for ops that are not native)")]
    if data["native_source"]:
        rows.append(("native ops from", data["native_source"]))
    diff = data["probe_vs_table"]
    if diff is not None:
        rows.append(("probe vs table", f"{diff['table_not_probed']} of the {diff['registered']} ops the table "
                     f"registers for {diff['version'] or 'its line'} have no kernel here"
                     + (f" (e.g. {', '.join(diff['examples_table_not_probed'])})" if diff['table_not_probed'] else "")
                     + f"; {diff['probed_not_in_table']} probed kernels are in no line of the table"
                     + (f" (e.g. {', '.join(diff['examples_probed_not_in_table'])})"
                        if diff['probed_not_in_table'] else "")))
    return rows


def _plugin_text(data: dict[str, Any]) -> str:
    if not data["plugin"]:
        return "(none: the backend is built into torch)"
    if data.get("plugin_emulated"):
        return (f"{data['plugin']} {data['plugin_emulated']} (torch-fl's emulation: `import {data['plugin']}` "
                f"gives it; the real plugin is not installed)")
    if data["plugin_installed"] is False:
        return f"{data['plugin']} (NOT INSTALLED)"
    return f"{data['plugin']} {data['plugin_version'] or '(unknown version)'}"


def _visible_text(visible: dict[str, Any]) -> str:
    if not visible["env"]:
        return "(this backend has no visible-devices variable)"
    return f"{visible['env']}=" + ("(unset)" if visible["value"] is None else repr(visible["value"]))


def _compat_text(compat: dict[str, Any]) -> str:
    verdict = {True: "ok", False: "OUTSIDE RANGE", None: "unknown"}[compat["ok"]]
    return f"{compat['spec']} (have {compat['have'] or '?'}: {verdict})"


def _check_text(check: dict[str, Any]) -> str:
    if not check["ran"]:
        return "not run"
    status = "ok" if check["ok"] else "FAILED"
    return f"{status} in {check['seconds'] * 1000:.1f} ms (first use: includes transfers and initialisation)"


def _verdict(problems: list[str]) -> list[str]:
    if not problems:
        return ["healthy"]
    return [f"{len(problems)} problem{'s' * (len(problems) > 1)}:", *_numbered(problems)]


def _numbered(items: list[str]) -> list[str]:
    return [line for i, item in enumerate(items, start=1)
            for line in textwrap.wrap(item, _WRAP, initial_indent=f"  {i}. ", subsequent_indent="     ",
                                      break_on_hyphens=False)]


# The report ---------------------------------------------------------------------------------------
