"""The device description schema: every key, its type, allowed values, default and meaning.

The schema is data so that validation, documentation (docs/descriptions.md) and `torchfl describe`
all read the same table. Bump SCHEMA_VERSION when a change would make older torch-fl misread a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1

DTYPE_NAMES = (
    "float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "complex128", "complex64", "complex32", "int64", "int32", "int16", "int8",
    "uint8", "uint16", "uint32", "uint64", "bool",
)
ROUTE_POLICIES = ("translate-or-error", "translate-or-fallback", "fallback", "error")
VENDOR_FALLBACKS = ("error", "cpu")  # ops.vendor_fallback (description/fallback.py)
LEVELS = ("none", "L0", "L1", "L2")
COLLECTIVE_BACKENDS = ("nccl", "rccl", "hccl", "cncl", "mccl", "xccl", "gloo", "flagcx", "mpi", "none")


@dataclass(frozen=True)
class Key:
    """One key of the schema."""

    type: str  # str | int | bool | list[str] | table[list[str]] | table[str] | table[tolerance] | native
    default: Any
    help: str
    allowed: tuple[str, ...] = ()
    required: bool = False
    item_allowed: tuple[str, ...] = field(default=())  # allowed values of list items / table values
    bounds: tuple[int, int] | None = None  # an int key's smallest and largest value
    pattern: str = ""  # a str key's form (a regular expression a non-empty value must match in full)
    form: str = ""  # that form in words, for the error


# The forms of the identity keys: the values reach torch.device(), os.environ and importlib as they are.
DEVICE_TYPE_FORM = (r"[a-z_][a-z0-9_]*", "a torch device type: lowercase letters, digits and '_', not starting "
                    "with a digit (npu, cuda, privateuseone)")
ENV_NAME_FORM = (r"[A-Za-z_][A-Za-z0-9_]*", "a POSIX environment variable name: letters, digits and '_', not "
                 "starting with a digit (ASCEND_RT_VISIBLE_DEVICES)")
MODULE_FORM = (r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", "a Python module name: identifiers joined "
               "by '.' (torch_npu, torch.npu)")
# A c10d backend name as torch.distributed.Backend.register_backend takes it (stored lower-case): checked by
# form, not against the known list, so that a chip whose collective library is its own can be described.
COLLECTIVE_FORM = (r"[a-z][a-z0-9_]*", "a torch.distributed backend name: lowercase letters, digits and '_', "
                   "starting with a letter (nccl, hccl, gloo, or the vendor's own)")
# A torch.compile backend as torch.compile(backend=NAME) takes a registered one (inductor, aot_eager, a vendor's).
COMPILE_BACKEND_FORM = (r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", "a torch.compile backend name: "
                        "an identifier, or identifiers joined by '.' (inductor, aot_eager, the vendor's own)")
# Every string value: one line of printable text, at most this long (a message key may take more).
MAX_TEXT = 300
MAX_MESSAGE = 2000
PRIORITY_BOUNDS = (-1000, 1000)

# The dense backend keys of c10's DispatchKey (torch._C.DispatchKey, between StartOfDenseBackends and
# EndOfDenseBackends): the keys a device's own kernels are registered on. Known without importing torch;
# a key a newer torch adds is taken where torch is loaded (see `backend_dispatch_keys`).
BACKEND_DISPATCH_KEYS = ("CPU", "CUDA", "HIP", "XLA", "MPS", "IPU", "XPU", "HPU", "VE", "Lazy", "MTIA", "MAIA",
                         "PrivateUse1", "PrivateUse2", "PrivateUse3", "Meta")


def backend_dispatch_keys() -> tuple[str, ...]:
    """The backend dispatch keys: the loaded torch's (torch._C.DispatchKey) where torch is imported, else
    BACKEND_DISPATCH_KEYS (validation never imports torch: it costs seconds)."""
    import sys

    torch = sys.modules.get("torch")
    try:
        members = list(torch._C.DispatchKey.__members__)  # type: ignore[union-attr]
        start, end = members.index("StartOfDenseBackends"), members.index("EndOfDenseBackends")
    except (AttributeError, ValueError):  # torch not imported (or blocked), or a torch without the markers
        return BACKEND_DISPATCH_KEYS
    return tuple(dict.fromkeys((*BACKEND_DISPATCH_KEYS, *members[start + 1:end])))


# Top-level keys (section None) and one dict per [section].
SCHEMA: dict[str | None, dict[str, Key]] = {
    None: {
        "schema": Key("int", SCHEMA_VERSION, "Schema version of this file.", required=True),
        "name": Key("str", "", "Short unique name (lowercase): cuda, npu, ascend-910b.", required=True),
        "vendor": Key("str", "", "Who makes the chip or maintains the stack."),
        "summary": Key("str", "", "One line saying what this description covers."),
        "device_type": Key("str", "", "torch device type the chip appears as (cuda, npu, cpu, ...): lowercase "
                           "letters, digits and '_'.", required=True, pattern=DEVICE_TYPE_FORM[0],
                           form=DEVICE_TYPE_FORM[1]),
        "dispatch_key": Key("str", "", "Dispatch key of the device's kernels: a backend key of torch's "
                            "DispatchKey (CPU, CUDA, MPS, XPU, PrivateUse1, ...).", required=True),
        "plugin": Key("str", "", "Module that registers the device with torch ('' = built into torch).",
                      pattern=MODULE_FORM[0], form=MODULE_FORM[1]),
        "visible_devices_env": Key("str", "", "Environment variable that selects visible devices (a POSIX "
                                   "name).", pattern=ENV_NAME_FORM[0], form=ENV_NAME_FORM[1]),
        "level": Key("str", "none", "Claimed support level; `torchfl grade` verifies it.", LEVELS),
        "extends": Key("str", "", "Name of a description this file starts from: its keys, each key this file "
                       "sets replacing that one ([ops.dtypes], [ops.kernels] and the tolerance tables merge "
                       "entry by entry). How a product generation of a chip is written (npu-910 extends npu)."),
        "generation": Key("str", "", "The product generation this description answers for, in the vendor's "
                          "words (Atlas A2 training series); named in dtype refusals with the generations "
                          "that do take the dtype."),
    },
    "detect": {
        "priority": Key("int", 0, "Higher is tried first during auto-detection (-1000 to 1000; negative: never "
                        "auto-detected). Two descriptions of one device type may not share one.",
                        bounds=PRIORITY_BOUNDS),
        "torch_build": Key("str", "any", "torch build this stack needs: any, cuda (NVIDIA) or hip (ROCm).",
                           ("any", "cuda", "hip")),
        "module": Key("str", "", "Module whose is_available()/device_count() tell whether the device is "
                      "present ('' = torch.<device_type>).", pattern=MODULE_FORM[0], form=MODULE_FORM[1]),
    },
    "compat": {
        "torch": Key("str", "", "torch versions the stack supports, e.g. '>=2.1,<2.10' ('' = any)."),
        "plugin": Key("str", "", "Plugin versions the description was written for."),
        "runtime": Key("str", "", "Driver/runtime versions the description was written for."),
        "python": Key("str", "", "Python versions the plugin's binaries are built for."),
    },
    "memory": {
        "allocator": Key("str", "caching", "How device memory is allocated.",
                         ("caching", "direct", "unified", "host")),
        "empty_cache": Key("bool", True, "Whether empty_cache() releases memory on this stack."),
        "stats": Key("bool", True, "Whether the stack reports allocator statistics."),
    },
    "streams": {
        "submission": Key("str", "async", "Kernel submission: async (like CUDA) or sync. Emulated, async defers "
                          "what the host sees of non-blocking copies until a sync (torchfl docs streams).",
                          ("async", "sync")),
        "streams": Key("bool", True, "Whether multiple streams are supported."),
        "events": Key("bool", True, "Whether events with elapsed-time are supported."),
    },
    "collectives": {
        "backend": Key("str", "gloo", "torch.distributed backend for this device: a registered c10d backend "
                       f"name (known: {', '.join(COLLECTIVE_BACKENDS)}; a vendor's own is accepted by its form).",
                       pattern=COLLECTIVE_FORM[0], form=COLLECTIVE_FORM[1]),
    },
    "precision": {
        "dtypes": Key("list[str]", list(DTYPE_NAMES), "dtypes the device supports.",
                      item_allowed=DTYPE_NAMES),
        "tested_dtypes": Key("list[str]", [], "dtypes the vendor's own test suite creates and computes on the chip "
                             "that precision.dtypes (the vendor's documentation) leaves out. Where the two sources "
                             "disagree the chip follows its tests: these dtypes count as the device's "
                             "(Description.dtypes), precision.dtypes stays the documented list.",
                             item_allowed=DTYPE_NAMES),
        "autocast_dtype": Key("str", "bfloat16", "dtype autocast uses on this device.", DTYPE_NAMES),
        "tolerances": Key("table[tolerance]", {}, "Per-dtype {rtol, atol} overriding the defaults.",
                          item_allowed=DTYPE_NAMES),
        "op_tolerances": Key("table[tolerance]", {}, "Per-op {rtol, atol} for precision comparison."),
    },
    "compile": {
        "jit": Key("bool", True, "Whether torch.compile is used on this device."),
        "aot": Key("bool", False, "Whether AOTInductor packages are supported."),
        "backend": Key("str", "inductor", "torch.compile backend name.", pattern=COMPILE_BACKEND_FORM[0],
                       form=COMPILE_BACKEND_FORM[1]),
        "dynamic_shapes": Key("str", "jit", "static: no dynamic shapes; jit: dynamic shapes via JIT; "
                              "dynamic: dynamic also for AOT.", ("static", "jit", "dynamic")),
        "cache_dir": Key("str", "~/.cache/torch_fl/{name}", "Compile cache root ({name} expands)."),
    },
    "ops": {
        "native": Key("native", "probe", "Native op set: 'probe' (ask the dispatcher on the live device), "
                      "'file:PATH' (a table relative to this file) or a list of op names."),
        "table": Key("str", "", "Vendor op table (a path relative to this file, written by "
                     "scripts/gen_op_tables.py --vendor from the vendor's public registrations) that gives "
                     "the native set of a probed chip where its backend is not loaded (offline, emulated, "
                     "no plugin), for the installed plugin version or the newest; its route=fallback rows "
                     "join ops.fallback."),
        "default": Key("str", "translate-or-error", "Route of ops that are not native.", ROUTE_POLICIES),
        "translate": Key("list[str]", [], "Ops forced to a generic (decomposed) implementation."),
        "fallback": Key("list[str]", [], "Ops forced to run on the CPU (counted and warned)."),
        "unsupported": Key("list[str]", [], "Ops that must raise a clear error."),
        "fused_attention": Key("bool", True, "Whether fused scaled-dot-product attention kernels exist; "
                               "false makes SDPA take the math path."),
        "dtypes": Key("table[list[str]]", {}, "Per-op dtype limits: op -> dtypes it is native for.",
                      item_allowed=DTYPE_NAMES),
        "tested_dtypes": Key("table[list[str]]", {}, "Per-op dtypes the vendor's own test suite runs on the chip "
                             "beyond its documented limits (ops.dtypes, the table's dtype rows): op -> the dtypes "
                             "its tests compute. Where the two sources disagree the chip follows its tests: they "
                             "join the op's limits (Description.op_dtypes), the documented ones stay readable "
                             "(Description.documented_op_dtypes).", item_allowed=DTYPE_NAMES),
        "kernels": Key("table[str]", {}, "Per-op fast-path kernels: op -> 'pkg.module:function'."),
        "measured": Key("table[list[str]]", {}, "Per-op dtypes whose native kernel `torchfl ops-bench` timed on "
                        "this chip against its alternatives (written into a user overlay).",
                        item_allowed=DTYPE_NAMES),
        "slow": Key("table[list[str]]", {}, "Per-op dtypes whose native kernel an alternative (translation, a "
                    "registered kernel, the CPU) beat in `torchfl ops-bench`: coverage and grade show them as "
                    "'native but slow'.", item_allowed=DTYPE_NAMES),
        "vendor_fallback": Key("str", "error", "What the vendor's stack does with an op that reaches its "
                               "dispatch key with no kernel there (no composite kernel either): 'cpu' (its "
                               "boxed fallback copies the inputs to the host, runs the CPU kernel and warns: "
                               "torch_npu, torch_mlu) or 'error' (NotImplementedError). Ops it runs on the CPU "
                               "route to fallback, not translate.", VENDOR_FALLBACKS),
        "vendor_fallback_env": Key("str", "", "The vendor's environment setting that flips vendor_fallback, "
                                   "as NAME=VALUE (ENABLE_FALLBACK_TO_CPU=0): NAME set to a value of VALUE's "
                                   "truth (1/true/yes/on or 0/false/no/off) gives the other behaviour ('' = "
                                   "no switch)."),
        "vendor_fallback_message": Key("str", "", "The vendor's warning when it falls back, '{op}' standing for "
                                       "the operator (quoted in routes' reasons and FallbackWarning)."),
    },
    "identity": {
        "device_name": Key("str", "", "The name the vendor's runtime reports for one device of this chip (its "
                           "get_device_name() and get_device_properties().name: Ascend910B1, MLU370-X8, MTT S4000, "
                           "NVIDIA A100-SXM4-80GB); the emulated chip reports it, so vendor code and tests gated on "
                           "the name take the chip's path ('' = '<vendor> <device_type>')."),
        "soc_version": Key("int", -1, "The vendor's SoC number where its plugin reports one (torch_npu's "
                           "torch_npu.npu.utils.get_soc_version(): Ascend910A 102, Ascend310P3 202, Ascend910B1 "
                           "220, Ascend910_9391 250; -1 = none, as torch_npu says for an unknown SoC).",
                           bounds=(-1, 100000)),
        "capability": Key("str", "", "The compute capability the vendor's get_device_capability() reports, as "
                          "'MAJOR.MINOR' (9.0 for an H100, 2.2 for an MTT S4000: torch_musa's arch 22); '' = none "
                          "(torch_npu reports None, and properties.major/minor are None).",
                          pattern=r"[0-9]+\.[0-9]+", form="MAJOR.MINOR (9.0)"),
    },
    "emulation": {
        "plugin_migration": Key("list[str]", [], "Submodules of the plugin whose import turns on the vendor's "
                                "CUDA-to-chip migration (torch_npu's contrib.transfer_to_npu); in the emulated "
                                "plugin they turn on torch-fl's CUDA alias.", pattern=MODULE_FORM[0],
                                form=MODULE_FORM[1]),
        "plugin_native": Key("str", "_C", "The plugin's C-extension module (torch_npu._C, torch_mlu._MLUC): the "
                             "emulated plugin offers it as a module of the device calls vendor code and tests "
                             "import from it (_npu_setDevice, _npu_hasPrimaryContext, ...).",
                             pattern=r"[A-Za-z_][A-Za-z0-9_]*", form="a Python identifier (_C, _MLUC)"),
        "plugin_is_device_module": Key("bool", False, "Whether the plugin package is itself the device module "
                                       "(torch_musa: `torch.musa` is `torch_musa`, so torch_musa.set_device, "
                                       "torch_musa.Event ... exist): the emulated package then offers the device "
                                       "module's names at its top level."),
        "plugin_ops": Key("str", "", "The emulator's module (torch_fl.routing.emu.NAME) computing the plugin's "
                          "own fused ops (torch_npu.npu_rms_norm, ...) that the emulated plugin offers."),
    },
}


def defaults() -> dict[str, Any]:
    """A description dict with every key at its default (name and identity left empty)."""
    out: dict[str, Any] = {}
    for section, keys in SCHEMA.items():
        target = out if section is None else out.setdefault(section, {})
        for key, spec in keys.items():
            value = spec.default
            target[key] = list(value) if isinstance(value, list) else (
                dict(value) if isinstance(value, dict) else value)
    return out
