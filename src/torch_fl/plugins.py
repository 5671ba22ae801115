"""Detection of the backend to use on this machine, and vendor plugin import.

Auto-detection tries descriptions in descending ``[detect] priority`` (built-ins: vendor plugins npu,
mlu, musa 60; cuda and rocm 50; xpu 40; mps 30; cpu 0, which always matches). A probe is cheap: no
subprocess, no import beyond the description's plugin. ``FL_BACKEND`` (or ``backend`` in a config
file) skips detection.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys

import torch

from . import _env
from ._versions import satisfies
from .description import registry
from .description.model import Description
from .description.probe import installed_version
from .errors import PluginImportError

_log = logging.getLogger("torch_fl.plugins")


def plugin_version(desc: Description) -> str:
    """Installed version of the description's plugin ('' when built into torch or not installed)."""
    return installed_version(desc.plugin)


def runtime_version(desc: Description) -> tuple[str, str]:
    """(runtime, version) torch reports for the description's device: ('cuda', '12.8'), ('hip', '6.3'),
    ('xpu', '20250101'); ('', '') when it reports none (the CPU, plugins torch knows nothing of).

    torch.version carries one attribute per runtime: the build flavour ([detect] torch_build) for in-tree
    backends, the device type for others (xpu). Doctor compares the version with [compat] runtime; the
    compile cache's fingerprint records both."""
    build = desc.section("detect")["torch_build"]
    for attr in dict.fromkeys(a for a in (build, desc.device_type) if a != "any"):
        value = getattr(torch.version, attr, None)
        if value and isinstance(value, str):
            return attr, value
    return "", ""


def import_plugin(desc: Description) -> None:
    """Import the description's plugin; a failure becomes a PluginImportError explaining version drift."""
    if not desc.plugin:
        return
    try:
        importlib.import_module(desc.plugin)
    except ModuleNotFoundError as exc:
        if exc.name != desc.plugin.split(".")[0]:
            raise _drift_error(desc, exc) from exc  # the plugin exists; one of its dependencies is missing
        raise PluginImportError(
            f"the '{desc.name}' backend needs the plugin '{desc.plugin}', which is not installed in this "
            f"Python environment ({sys.executable}). Install the build of {desc.plugin} that matches torch "
            f"{torch.__version__} (compatible torch per {desc.path}: {desc.section('compat')['torch'] or 'any'}),"
            f" or set FL_BACKEND=cpu to run without it.") from exc
    except Exception as exc:
        raise _drift_error(desc, exc) from exc


def _drift_error(desc: Description, exc: Exception) -> PluginImportError:
    """The version-drift message: what failed, the installed torch, and the range the stack supports."""
    compat = desc.section("compat")
    drift = ""
    if compat["torch"] and not satisfies(torch.__version__, compat["torch"]):
        drift = (f" The installed torch {torch.__version__} is outside the range this description "
                 f"supports ({compat['torch']}).")
    version = plugin_version(desc) or "unknown version"
    return PluginImportError(
        f"the '{desc.name}' backend needs the plugin '{desc.plugin}' ({version}), and importing it "
        f"failed: {type(exc).__name__}: {exc}.{drift} Installed torch: {torch.__version__}; "
        f"compatible torch per {desc.path}: {compat['torch'] or 'any'}; plugin: "
        f"{compat['plugin'] or 'any'}. Vendor plugins are compiled against one torch release: install "
        f"the plugin build that matches torch {torch.__version__} (or the torch its build needs), in a "
        f"fresh environment with both versions pinned. To run without this backend now, set "
        f"FL_BACKEND=cpu.")


def _module_for(desc: Description):
    name = desc.section("detect")["module"] or f"torch.{desc.device_type}"
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def is_present(desc: Description) -> bool:
    """Cheap probe: is this description's device present and usable on this machine?"""
    build = desc.section("detect")["torch_build"]
    if build != "any" and getattr(torch.version, build, None) is None:
        return False
    if desc.plugin:
        if importlib.util.find_spec(desc.plugin.split(".")[0]) is None:
            return False
        import_plugin(desc)
    module = _module_for(desc)
    if module is None or not hasattr(module, "is_available"):
        return False
    try:
        if not module.is_available():
            return False
        count = getattr(module, "device_count", None)
        return count is None or count() > 0
    except Exception as exc:  # a driver problem reads as "absent", but not silently
        _log.warning("probing %s raised %s: %s; treating it as absent", desc.name, type(exc).__name__, exc)
        return False


def device_count(desc: Description) -> int:
    """How many devices of this description the runtime exposes (CPU: 1)."""
    if desc.device_type == "cpu":
        return 1
    import_plugin(desc)
    module = _module_for(desc)
    count = getattr(module, "device_count", None)
    try:
        if count is not None:
            return int(count())
        return 1 if module is not None and module.is_available() else 0
    except Exception:
        return 0


def detect() -> tuple[Description, str]:
    """The description to use here, and why: 'FL_BACKEND', a config file path, or 'auto-detected'."""
    forced = _env.FL_BACKEND.get()
    source = "FL_BACKEND"
    if not forced:
        found = _env.config_value("backend")
        if found:
            forced, source = found
    if forced:
        desc = registry.get(forced)
        import_plugin(desc)
        return desc, source
    candidates = sorted(registry.descriptions().values(),
                        key=lambda d: (-d.section("detect")["priority"], d.name))
    for desc in candidates:
        if desc.section("detect")["priority"] < 0:
            continue  # negative priority: emulation-only descriptions, never auto-detected
        if is_present(desc):
            return desc, "auto-detected"
    return registry.get("cpu"), "auto-detected"
