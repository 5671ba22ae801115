"""What torch-fl sees on this machine, a self-check, and what to do when it fails (``torchfl doctor``, and
``torchfl bugreport``'s environment part).

Three layers keep it testable: `collect` gathers facts into a JSON-ready dict and never raises on a
broken setup (failures become entries of ``errors``), `diagnose` turns the facts into problems that
each name a next step, and `build_report` (doctor_text.py) lays the facts out as a torch_fl.report.Report (sections of
'key: value' fields, then the verdict), which the one report renderer prints. `examine` runs the three and
returns a :class:`DoctorReport`; the command (cli/doctor.py) only parses and prints it.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from .. import _env, _platform, runtime
from .._names import RouteKind
from .._version import __version__
from .._versions import satisfies
from ..description import registry
from ..description.model import Description
from ..description.vendor_table import probe_vs_table
from ..device import (
    EMULATION_PREFIX,
    _default_id,
    backend,
    device_map,
    explicit_map,
    governing,
)
from ..errors import DeviceNotFoundError, PluginImportError, TorchFLError
from ..plugins import plugin_version, runtime_version
from ..report import Report, render_text
from ..routing.current import use_device
from .doctor_text import build_report, map_text, render_doctor_text  # noqa: F401  (render_doctor_text: doctor's API)

_SIZE = 64
_RTOL, _ATOL = 1e-4, 1e-5
# Error types whose messages say what is wrong but not always what to do; the others already do.
_NEXT_STEP = {
    "DescriptionError": " Next step: fix that description file, or stop pointing FL_DESCRIPTION / "
                        "FL_DESCRIPTION_PATH (or the entry point that provides it) at it.",
    "ConfigError": " Next step: correct that value, or unset it to fall back to auto-detection.",
}


# Facts --------------------------------------------------------------------------------------------
def collect(device: str | None = None, *, plugin_timeout: float | None = None) -> dict[str, Any]:
    """Everything doctor reports about `device` (default: torch.fl.device()), as JSON-ready data.

    Every vendor plugin detection would import is imported in a child process first (plugin_load.py): one
    that crashes or fails there is reported, and not imported into this process."""
    data = _skeleton()
    _check_env(data)
    _requested(data, device)
    broken = _load_plugins(data, plugin_timeout)
    if broken is not None:
        data["backend"] = {"name": broken.name, "source": "the plugin's import failed in a child process"}
        _describe(data, broken, None, routes=False)
        return data
    selected = _selected_backend(data)
    if selected is None:
        return data
    mapped = _device_map(data)
    dev = _resolve(data, device) if mapped else None
    _describe(data, _governing(data, dev, selected), dev)
    if dev is not None:
        data["self_check"] = self_check(dev)
    data["emulation"] = _emulation()
    return data


def _load_plugins(data: dict[str, Any], timeout: float | None) -> Description | None:
    """Import, each in a child process, the plugins detection would import here; the description of the
    first that fails (None when all load, or none is installed)."""
    from . import plugin_load

    failed = None
    for desc in _plugin_candidates():
        result = plugin_load.load(desc.plugin, timeout=timeout or plugin_load.DEFAULT_TIMEOUT)
        data["plugin_load"].append({"description": desc.name, **result.json()})
        if not result.ok and failed is None:
            data["errors"].append({"stage": "plugin", "type": "PluginLoadError",
                                   "message": result.problem() + _released_for(desc)})
            failed = desc
    return failed


def _released_for(desc: Description) -> str:
    """What the vendor released the installed plugin for (torch, Python, runtime), from the release facts."""
    from . import compat

    version = plugin_version(desc)
    rows = compat.releases(desc.plugin, version) if version else []
    if not rows:
        return ""
    facts = compat.facts(desc.plugin)
    runtime = " or ".join(sorted({r["runtime"] for r in rows if r["runtime"]})) or "an unrecorded version"
    return (f" The vendor released {desc.plugin} {version} for torch {' or '.join(r['torch'] for r in rows)}, "
            f"Python {', '.join(rows[0]['python']) or '?'} and {facts['runtime_name']} {runtime} ({facts['path']}).")


def _plugin_candidates() -> list[Description]:
    """The descriptions whose plugin detection would import and that is installed, not yet imported and
    not torch-fl's emulation of it."""
    try:
        forced = _env.FL_BACKEND.get() or (_env.config_value("backend") or ("", ""))[0]
        descs = [registry.get(forced)] if forced else [
            d for d in registry.descriptions().values() if d.section("detect")["priority"] >= 0]
    except TorchFLError:
        return []  # reported by the stages that load them
    found = []
    for desc in descs:
        top = desc.plugin.split(".")[0] if desc.plugin else ""
        if not top or top in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and type(spec.loader).__name__ != "EmulatedPlugin":
            found.append(desc)
    return found


def _emulation() -> dict[str, Any]:
    from ..routing import emu

    return emu.status()


def _governing(data: dict[str, Any], dev: torch.device | None, selected: Description) -> Description:
    """The description doctor reports: the emulated chip's for emu:NAME, else the device's."""
    requested = data["device"]["requested"] or ""
    if dev is None and not requested.startswith(EMULATION_PREFIX):
        return selected
    try:
        return governing(requested or None)
    except TorchFLError as exc:  # emu:NAME with an unknown NAME: report it, describe the backend instead
        _record(data, "description", exc)
        return selected


def _skeleton() -> dict[str, Any]:
    # Every key exists even when a stage fails, so JSON consumers need no existence checks.
    return {
        "torch_fl_version": __version__,
        "torch_version": torch.__version__,
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": platform.platform(),
        "environment": _platform.environment_kind(),
        "device": {"requested": "", "source": "", "resolved": ""},
        "device_type": "", "vendor": "", "device_name": "",
        "backend": {"name": "", "source": ""},
        "device_map": {}, "device_map_source": "",
        "visible_devices": {"env": "", "value": None},
        "plugin": "", "plugin_installed": None, "plugin_version": "", "plugin_emulated": "", "runtime_version": "",
        "description": {"name": "", "path": "", "sha256": "", "builtin": False, "level": "",
                        "device_type": "", "torch_build": "", "compat": {}},
        "routes": {}, "route_default": "", "native_source": "",
        "plugin_load": [],  # each plugin imported in a child process: plugin_load.LoadResult.json()
        "release_compat": None,  # the plugin release against the vendor's facts: compat.CompatResult.json()
        "probe_vs_table": None,  # live device with a vendor table: where the dispatcher and table differ
        "cache_dir": "",
        "self_check": {"ok": False, "ran": False, "detail": "not run: no device was resolved",
                       "seconds": None},
        "unknown_variables": [], "shadowed_descriptions": {},
        "settings": [],  # every setting that is set: name, key, value, source (variable or file), kind
        "emulation": {"active": False, "emulator": "", "privateuse1": "", "borrowed": False, "devices": 0,
                      "chip": "", "detail": ""},
        "errors": [],
    }


def _record(data: dict[str, Any], stage: str, exc: Exception) -> None:
    data["errors"].append({"stage": stage, "type": type(exc).__name__, "message": str(exc)})


def _check_env(data: dict[str, Any]) -> None:
    # The same parsers the API uses (torch_fl._env), so doctor never calls healthy what the API rejects.
    for exc in _env.problems():
        _record(data, "env", exc)
    data["unknown_variables"] = _env.unknown()
    data["settings"] = [
        {"name": var.name, "key": var.key, "value": found.text or _setting_text(found.value),
         "source": found.source, "kind": found.kind}
        for var, found in _env.settings() if not isinstance(found, Exception)]
    try:
        data["shadowed_descriptions"] = {name: f"{path} ({origin})"
                                         for name, (path, origin) in registry.shadowed().items()}
    except TorchFLError:
        pass  # a broken description is reported by the stages that load it


def _setting_text(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return os.pathsep.join(map(str, value))
    return str(value)


def _requested(data: dict[str, Any], device: str | None) -> None:
    try:
        requested, source = (device, "--device") if device else _default_id()
    except TorchFLError as exc:
        _record(data, "config", exc)
        return
    data["device"].update(requested=requested, source=source)


def _selected_backend(data: dict[str, Any]) -> Description | None:
    try:
        selected = backend()
    except PluginImportError as exc:
        _record(data, "plugin", exc)
        _describe_forced(data)
        return None
    except TorchFLError as exc:
        _record(data, "backend", exc)
        return None
    data["backend"] = {"name": selected.description.name, "source": selected.source}
    return selected.description


def _describe_forced(data: dict[str, Any]) -> None:
    # detect() failed before returning the description; look up the same forced name it used so the
    # report still says which backend and plugin were wanted.
    forced, source = _env.FL_BACKEND.get(), "FL_BACKEND"
    try:
        if not forced:
            forced, source = _env.config_value("backend") or ("", "")
        desc = registry.get(forced) if forced else None
    except TorchFLError:
        return
    if desc is not None:
        data["backend"] = {"name": desc.name, "source": source}
        # A probed op set without the plugin loaded would count composite kernels only: skip it.
        _describe(data, desc, None, routes=False)


def _device_map(data: dict[str, Any]) -> bool:
    try:
        explicit = explicit_map()
        mapping = device_map()
    except TorchFLError as exc:
        _record(data, "device_map", exc)
        return False
    data["device_map"] = {virtual: str(physical) for virtual, physical in mapping.items()}
    data["device_map_source"] = explicit[1] if explicit else "auto-detected"
    return True


def _resolve(data: dict[str, Any], device: str | None) -> torch.device | None:
    try:
        dev = use_device(device)
    except TorchFLError as exc:
        _record(data, "device", exc)
        return None
    data["device"]["resolved"] = str(dev)
    return dev


def _describe(data: dict[str, Any], desc: Description, dev: torch.device | None, *,
              routes: bool = True) -> None:
    version = plugin_version(desc)
    runtime = runtime_version(desc)[1]
    data.update(
        device_type=dev.type if dev is not None else desc.device_type, vendor=desc.vendor,
        device_name=device_name(dev) if dev is not None else "", plugin=desc.plugin,
        plugin_installed=_installed(desc.plugin), plugin_version=version, runtime_version=runtime,
        plugin_emulated=_emulated_plugin_version(desc.plugin),
        route_default=desc.section("ops")["default"],
        cache_dir=str(_env.FL_CACHE_DIR.value() or desc.cache_dir()),  # the variable or a config file's cache_dir
        visible_devices=_visible_devices(desc),
        description={"name": desc.name, "path": desc.path, "sha256": desc.sha256, "builtin": desc.builtin,
                     "level": desc.data["level"], "device_type": desc.device_type,
                     "torch_build": desc.section("detect")["torch_build"],
                     "compat": compat_check(desc, version, runtime)},
        release_compat=release_check(desc, version, runtime))
    if not routes:
        return
    try:
        data["routes"] = route_counts(desc)
        data["native_source"] = desc.native_source
        data["probe_vs_table"] = probe_vs_table(desc)
    except Exception as exc:  # a broken op table must not hide the rest of the report
        _record(data, "routes", exc)


def _installed(plugin: str) -> bool | None:
    return importlib.util.find_spec(plugin.split(".")[0]) is not None if plugin else None


def _emulated_plugin_version(plugin: str) -> str:
    """The version torch-fl's emulation of `plugin` reports when `import plugin` gives it ('' otherwise)."""
    from ..routing.emu import plugin as emulated

    found = emulated.installed().get(plugin.split(".")[0]) if plugin else None
    return emulated.plugin_version(found.desc) if found is not None else ""


def _visible_devices(desc: Description) -> dict[str, Any]:
    env = desc.visible_devices_env
    return {"env": env, "value": os.environ.get(env) if env else None}


def compat_check(desc: Description, plugin: str, runtime: str) -> dict[str, dict[str, Any]]:
    """Installed versions against the description's [compat] ranges; ok is None when unknown."""
    have = {"torch": torch.__version__, "plugin": plugin, "runtime": runtime,
            "python": platform.python_version()}
    return {key: {"spec": spec, "have": have.get(key, ""),
                  "ok": satisfies(have[key], spec) if have.get(key) else None}
            for key, spec in desc.section("compat").items() if spec}


def release_check(desc: Description, plugin: str, runtime: str) -> dict[str, Any] | None:
    """The installed plugin release, torch, Python and vendor toolkit against the vendor's release facts, or
    torch's own CUDA/ROCm/XPU build against the driver (analysis/build_compat.py); None when neither
    applies (no facts for the plugin, or it is not installed; a CPU-only torch)."""
    from . import build_compat, compat

    if compat.facts(desc.plugin) is not None:
        return compat.installed_check(desc.plugin, plugin, runtime)
    result = build_compat.check_here()
    return {**result.json(), "problem": result.problem()} if result is not None else None


def route_counts(desc: Description) -> dict[RouteKind, int]:
    """How many aten overloads this dispatcher knows take each route under `desc` (regardless of
    dtype), from the routing module's route table with every override in force."""
    from ..routing import RouteTable, registered_kernels

    return {RouteKind(kind): n for kind, n in RouteTable(desc, registered_kernels()).summary().items()}


def device_name(dev: torch.device) -> str:
    """The product name of `dev` ('' when its runtime cannot say, e.g. a device this build lacks)."""
    try:
        return runtime.get_device_properties(dev).name
    except Exception:
        return ""


# Self-check ---------------------------------------------------------------------------------------
def self_check(dev: torch.device) -> dict[str, Any]:
    """A seeded 64x64 float32 matmul on `dev`, compared with the CPU result."""
    from ..routing import suspended

    with suspended():  # the reference is plain host PyTorch, even next to an emulated chip
        generator = torch.Generator().manual_seed(0)
        a, b = (torch.randn(_SIZE, _SIZE, generator=generator) for _ in range(2))
        expected = a @ b
    start = time.perf_counter()
    try:
        got = _matmul_on(dev, a, b)
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [""])[0]
        return _check(False, f"a {_SIZE}x{_SIZE} float32 matmul on {dev} raised {type(exc).__name__}: "
                      f"{first_line}", start)
    with suspended():
        diff = (got - expected).abs().max().item()
        close = torch.allclose(got, expected, rtol=_RTOL, atol=_ATOL)
    if close:
        return _check(True, f"{_SIZE}x{_SIZE} float32 matmul on {dev} matches the CPU result (max abs "
                      f"diff {diff:.1e})", start)
    return _check(False, f"{_SIZE}x{_SIZE} float32 matmul on {dev} differs from the CPU result: max abs "
                  f"diff {diff:.1e} exceeds rtol={_RTOL:g}, atol={_ATOL:g}", start)


def _matmul_on(dev: torch.device, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = a.to(dev) @ b.to(dev)
    runtime.synchronize(dev)  # an asynchronous launch failure surfaces here, not in a later unrelated call
    return out.cpu()


def _check(ok: bool, detail: str, start: float) -> dict[str, Any]:
    return {"ok": ok, "ran": True, "detail": detail, "seconds": round(time.perf_counter() - start, 4)}


# Diagnosis ----------------------------------------------------------------------------------------
# Set by the launcher when torch's backend entry points failed to load (its text: torch's error).
AUTOLOAD_FAILED = "TORCH_FL_AUTOLOAD_FAILED"

def diagnose(data: dict[str, Any]) -> list[str]:
    """Problems that make this setup unusable, each ending with a next step (empty when healthy)."""
    problems = [_explain(data, error) for error in data["errors"] if not _covered(data, error)]
    autoload = os.environ.get(AUTOLOAD_FAILED, "")
    if autoload:
        # the launcher (src/_torch_fl_cli.py) met it and ran this doctor again with the entry points off
        problems.append(f"`import torch` fails in this environment: {autoload} Why: a package registers itself "
                        "in torch's torch.backends entry point group, so every `import torch` imports it, and its "
                        "import fails (this doctor ran with TORCH_DEVICE_BACKEND_AUTOLOAD=0). Fix: repair or "
                        "uninstall that package (the plugin section above says why its import fails, when it is "
                        "the description's plugin), or export TORCH_DEVICE_BACKEND_AUTOLOAD=0 meanwhile.")
    if data["release_compat"] and data["release_compat"]["problem"]:
        problems.append(data["release_compat"]["problem"])
    if _no_devices(data):
        problems.append(_no_devices_problem(data))
    check = data["self_check"]
    if check["ran"] and not check["ok"]:
        problems.append(_self_check_problem(data))
    return list(dict.fromkeys(problems))  # one bad config file fails several stages the same way


def cautions(data: dict[str, Any]) -> list[str]:
    """Findings that do not stop torch-fl but may explain odd behaviour."""
    desc = data["description"]
    return [f"{key} {c['have']} is outside the range {c['spec']} that the '{desc['name']}' description "
            f"({desc['path']}) was written for; if something misbehaves, try a {key} in that range"
            for key, c in desc["compat"].items() if c["ok"] is False] + [
        *((data["release_compat"] or {}).get("cautions") or []),
        *(_duplicates_caution(entry) for entry in data["plugin_load"] if entry["duplicates"]),
        *data["unknown_variables"],
        *(shadowing_warning(name, where) for name, where in data["shadowed_descriptions"].items())]


def _duplicates_caution(entry: dict[str, Any]) -> str:
    from .plugin_load import LoadResult

    return LoadResult(entry["module"], entry["status"], duplicates=entry["duplicates"]).caution()


def shadowing_warning(name: str, where: str) -> str:
    return (f"the built-in '{name}' description is replaced by {where}; that is allowed, but every "
            f"'{name}' device now follows that file. If that is not intended, rename the file's 'name'")


def _no_devices(data: dict[str, Any]) -> bool:
    loaded = data["backend"]["name"] and not any(e["stage"] in ("plugin", "backend") for e in data["errors"])
    return bool(loaded and data["device_map_source"] and not data["device_map"])


def _covered(data: dict[str, Any], error: dict[str, str]) -> bool:
    # With no devices at all, "device acc0 does not exist" restates the real problem less helpfully; a
    # bad FL_* value fails later stages with the same message as the env check.
    if error["stage"] != "env" and any(e["stage"] == "env" and e["message"] == error["message"]
                                       for e in data["errors"]):
        return True
    return error["type"] == DeviceNotFoundError.__name__ and _no_devices(data)


def _explain(data: dict[str, Any], error: dict[str, str]) -> str:
    if error["stage"] == "plugin" and data["plugin_installed"] is False:
        return _missing_plugin_problem(data)
    if error["stage"] == "routes":
        return (f"computing the route summary failed: {error['type']}: {error['message']}. Next step: "
                f"check the [ops] section of {data['description']['path']}.")
    if error["stage"] == "env":  # the env layer's message already ends with the fix
        return _sentence(error["message"])
    return _sentence(error["message"]) + _NEXT_STEP.get(error["type"], "")


def _missing_plugin_problem(data: dict[str, Any]) -> str:
    plugin, source = data["plugin"], data["backend"]["source"]
    undo = "unset FL_BACKEND" if source == "FL_BACKEND" else f"remove 'backend' from {source}"
    return (f"the '{data['backend']['name']}' backend (selected by {source}) needs the plugin '{plugin}', "
            f"which is not installed in this Python environment ({sys.executable}). Next step: install the "
            f"package that provides '{plugin}' into this environment (see {data['description']['path']} "
            f"for the versions it expects), or {undo} to auto-detect, or set FL_BACKEND=cpu.")


def _no_devices_problem(data: dict[str, Any]) -> str:
    backend_, source = data["backend"], data["device_map_source"]
    if source != "auto-detected":
        return (f"the device map from {source} is empty. Next step: list devices there (example: "
                f"FL_DEVICE_MAP='acc0=cuda:0'), or remove it to auto-detect.")
    steps = [_visible_step(data["visible_devices"])]
    build = data["description"]["torch_build"]
    if build not in ("", "any") and not data["runtime_version"]:
        steps.append(f"install a torch wheel built for {build}: torch {data['torch_version']} is not one "
                     f"(torch.version.{build} is None)")
    if data["plugin"]:
        steps.append(f"check that the plugin '{data['plugin']}' "
                     f"({data['plugin_version'] or 'unknown version'}) matches the driver and runtime")
    steps.append("check the driver: the vendor's device-management tool should list the devices")
    steps.append(_environment_step(data["environment"]))
    return (f"no devices visible to the '{backend_['name']}' backend (selected: {backend_['source']}). "
            f"Next steps: {'; '.join(filter(None, steps))}. To run on the CPU meanwhile, set FL_BACKEND=cpu.")


def _visible_step(visible: dict[str, Any]) -> str:
    if not visible["env"]:
        return ""
    value = "unset" if visible["value"] is None else f"currently '{visible['value']}'"
    return f"check {visible['env']} ({value}; an empty or wrong value hides devices)"


def _environment_step(kind: str) -> str:
    if kind.startswith("container"):
        return (f"check that the devices and driver are passed into this {kind}: docker --device or "
                f"--gpus, or a Kubernetes device plugin")
    if "WSL1" in kind:
        return "move to WSL2: WSL1 has no GPU passthrough"
    if "WSL2" in kind:
        return "check WSL2 GPU passthrough: the Windows host driver must support WSL and be current"
    return ""


def _self_check_problem(data: dict[str, Any]) -> str:
    dev, backend_ = data["device"], data["backend"]
    text = "self-check failed: " + _sentence(data["self_check"]["detail"])
    backend_type = _backend_device_type(backend_["name"])
    if data["device_type"] not in (backend_type, "cpu"):
        origin = data["device_map_source"] if dev["requested"] in data["device_map"] else dev["source"]
        return (f"{text} '{dev['requested']}' resolves to {dev['resolved']} (from {origin}), but this "
                f"process's backend is '{backend_['name']}' ({backend_['source']}), which has no "
                f"'{data['device_type']}' devices. Next step: point {origin} at a device of this machine "
                f"(current map: {map_text(data['device_map'])}) or unset it." + _try_backend_step(data))
    return (f"{text} Next step: compare the driver, runtime and plugin versions above with the description's "
            f"[compat] ranges, then report it with `torchfl bugreport`.")


def _try_backend_step(data: dict[str, Any]) -> str:
    desc = data["description"]
    if desc["device_type"] != data["device_type"]:
        return ""  # no description drives this device type (meta, ...): nothing to try
    return (f" If '{data['device_type']}' devices should be present, run FL_BACKEND={desc['name']} "
            f"torchfl doctor to see why that backend was not detected.")


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _backend_device_type(name: str) -> str:
    try:
        return registry.get(name).device_type if name else ""
    except TorchFLError:
        return ""


@dataclass
class DoctorReport:
    """The facts `collect` gathered, the problems (each with a next step) and the warnings."""

    data: dict[str, Any]
    problems: list[str]
    warnings: list[str]

    @property
    def healthy(self) -> bool:
        return not self.problems

    def json(self) -> dict[str, Any]:
        """What ``torchfl doctor --json`` prints (docs/cli.md)."""
        return {**self.data, "problems": self.problems, "warnings": self.warnings, "healthy": self.healthy}

    def report(self) -> Report:
        """The report ``torchfl doctor`` prints: its text (torch_fl.report.render_text), with `json` as its
        data; both redacted as `torchfl bugreport` redacts (FL_* values, paths, random tokens: people paste
        doctor's output into issues), torch-fl's own description digest kept."""
        from ..redact import redact_data

        data = redact_data(self.json(), safe={self.data["description"]["sha256"]} - {""})
        assert isinstance(data, dict)
        return build_report(data, data["problems"], data["warnings"])

    def text(self) -> str:
        return render_text(self.report())


def examine(device: str | None = None, *, plugin_timeout: float | None = None,
            bisect_env: bool = False) -> DoctorReport:
    """Collect, diagnose and caution for `device` (default torch.fl.device()); with `bisect_env`, also find
    the LD_LIBRARY_PATH / PYTHONPATH / LD_PRELOAD entries that break the plugin's import (plugin_bisect.bisect_env)."""
    data = collect(device, plugin_timeout=plugin_timeout)
    problems = diagnose(data)
    if bisect_env:
        found = data["bisect"] = _bisect(data, plugin_timeout)
        if found["culprits"]:
            fixes = [f"export {var}={shlex.quote(value)}" if value else f"unset {var}"
                     for var, value in found["minimal"].items()]
            problems.append(f"{found['verdict']}. Fix: {'; '.join(fixes)}")
    return DoctorReport(data, problems, cautions(data))


def _bisect(data: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    from . import plugin_bisect, plugin_load

    failed = [entry for entry in data["plugin_load"] if entry["status"] != "ok"]
    module = failed[0]["module"] if failed else data["plugin"]
    if not module:
        return {"module": "", "verdict": "no plugin to import: the backend is built into torch", "culprits": [],
                "minimal": {}, "runs": 0, "lines": []}
    result = plugin_bisect.bisect_env(module, timeout=timeout or plugin_load.DEFAULT_TIMEOUT)
    return {**result.json(), "lines": result.lines()}
