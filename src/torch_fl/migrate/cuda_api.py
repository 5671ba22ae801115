"""The CUDA API surface and what each part becomes under torch.fl: one table for the scanner, the
fixer, the runtime CUDA alias and the runtime facade.

Importable without torch (``torchfl scan`` runs in hook environments that have no torch): stdlib only,
and no dataclasses (their import of inspect costs a linter's start-up): entries are NamedTuples.

Every entry is a :class:`CudaAPI`, keyed by its qualified name (``"torch.cuda.is_available"``). Readers:

* the scanner (``migrate/rules``): which rule reports a use, its remedy text and fix safety;
* the fixer: ``replacement``, the expression written in place of the callee;
* the runtime CUDA alias (``migrate/alias.py``, ``migrate/patches.py``): ``alias``, the torch.fl facade
  call a ``torch.cuda`` call is routed to while the alias is on, and ``takes_device``;
* the runtime facade: :data:`FACADE`, the torch.fl calls with a ``torch.cuda`` counterpart.

Meaning, not spelling (issue 11): in CUDA-era code ``torch.cuda.is_available()`` asks "is there an
accelerator?", and ``"cuda"`` means "the accelerator". A replacement must keep that meaning on every
host, the CPU included: ``torch.cuda.is_available()`` becomes ``torch.fl.is_accelerator()`` (False on a
CPU-only host, as before), never ``torch.fl.is_available()`` (True on the CPU). A fix is "safe" only when
it keeps behaviour on the host the code already ran on (CUDA or the CPU); "unsafe" when it may change it
there (the note says how); None when there is no mechanical rewrite.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

__all__ = [
    "ACCELERATOR_PREDICATE", "BACKEND_FLAGS", "CUDA_API", "CUDA_DEVICE", "CUDA_TENSOR_TYPES", "DEFAULT_REMEDY",
    "DEVICE_CHOICE", "FACADE", "NCCL", "BackendFlag", "CudaAPI", "Kind", "Safety", "backend_flag",
    "device_replacement", "lookup",
]

Safety = Literal["safe", "unsafe"] | None
Kind = Literal["function", "class", "type", "module", "attribute"]

# A device string naming CUDA: "cuda" or "cuda:N" (group 1: N). The one regex for this: the scanner,
# the fixer and the runtime alias all ask it.
CUDA_DEVICE = re.compile(r"cuda(?::(\d+))?")
# The CUDA collective backend name.
NCCL = "nccl"
# What "is this an accelerator?" becomes: False on a CPU-only host, True on CUDA, NPU, MLU, XPU, MPS, ...
ACCELERATOR_PREDICATE = "torch.fl.is_accelerator()"
# What the device-choice idiom `"cuda" if torch.cuda.is_available() else "cpu"` becomes.
DEVICE_CHOICE = "torch.fl.device()"
DEFAULT_REMEDY = ("No torch.fl equivalent: keep it CUDA-only behind `if torch.fl.device_type() == \"cuda\":`, "
                  "or use the torch.fl runtime API (docs/runtime.md)")


class CudaAPI(NamedTuple):
    """One name of the CUDA Python API.

    Attributes:
        name: qualified name, ``"torch.cuda.memory_allocated"``.
        kind: "function", "class" (Stream, Event), "type" (legacy typed tensors), "module"
            (``torch.cuda.nvtx``) or "attribute" (``torch.version.cuda``).
        replacement: the callee the fixer writes instead (``"torch.fl.memory_allocated"``); arguments
            are kept. None: no mechanical rewrite. A few entries need a shaped rewrite the fixer knows
            by name (``get_device_name``, ``amp.autocast``, ``amp.GradScaler``).
        safety: "safe", "unsafe" or None (see the module docstring).
        remedy: what to use instead, for the finding's message.
        note: why a fix is unsafe or absent (in the rule docs).
        alias: for the runtime CUDA alias (H16, migrate/alias.py + patches.py): the name of the torch.fl
            facade call that stands in for this one while the alias is on, called with the alias target
            as the device; None when the alias leaves the CUDA call alone. It may differ from
            `replacement`: the alias runs on a machine that has the target accelerator, so
            ``torch.cuda.is_available`` is aliased to ``is_available`` (of the target), while the static
            rewrite needs ``is_accelerator`` (meaning kept on a CPU-only host too).
        takes_device: the first parameter is a device (the alias maps a CUDA device to its target).
        alias_refuses: the alias raises (naming itself and `remedy`) instead of running the CUDA call: off
            CUDA it would be silently wrong (a CUDA graph capturing work that runs elsewhere). Entries with
            neither `alias` nor `alias_refuses` run as they are; when they fail, the error names the alias
            and `remedy`.
    """

    name: str
    kind: Kind = "function"
    replacement: str | None = None
    safety: Safety = None
    remedy: str = DEFAULT_REMEDY
    note: str = ""
    alias: str | None = None
    takes_device: bool = False
    alias_refuses: bool = False

    @property
    def short(self) -> str:
        """The name below ``torch.cuda.`` (``"amp.autocast"``)."""
        return self.name.removeprefix("torch.cuda.")


def _api(name: str, replacement: str | None = None, safety: Safety = None, *, kind: Kind = "function",
         remedy: str | None = None, note: str = "", alias: str | None = None,
         takes_device: bool = False, alias_refuses: bool = False) -> CudaAPI:
    if remedy is None:
        remedy = f"Replace with `{replacement}()`" if replacement else DEFAULT_REMEDY
    return CudaAPI(f"torch.cuda.{name}" if not name.startswith("torch.") else name, kind, replacement, safety,
                   remedy, note, alias, takes_device, alias_refuses)


_MEMORY_NOTE = ("On a CPU-only host torch.cuda reports 0 and torch.fl the process's resident set "
                "(docs/runtime.md, host memory), so the CPU host's output changes (`get_gpu_mem()` logged 0.0, "
                "now 225 MB): unsafe. Where CUDA ran the figure is the same.")
_SEED_NOTE = ("torch.fl.manual_seed seeds every generator, the CPU's included, so random numbers drawn on "
              "the CPU afterwards change (torch.cuda.manual_seed leaves them alone).")

_ENTRIES: tuple[CudaAPI, ...] = (
    # Availability and device choice.
    _api("is_available", "torch.fl.is_accelerator", "safe", alias="is_available",
         note="`torch.fl.is_accelerator()` is False on a CPU-only host as `torch.cuda.is_available()` "
              "was, and True on any accelerator."),
    _api("device_count", "torch.fl.device_count", "unsafe", alias="device_count",
         note="On a CPU-only host torch.cuda.device_count() is 0 and torch.fl.device_count() is 1 (the "
              "host counts as one device): `if n_gpu > 0` changes branch there."),
    _api("current_device", "torch.fl.current_device", "safe", alias="current_device",
         note="Passed as a device (`device=`, `.to(...)`, `torch.device(...)`) it becomes `torch.fl.device()`, "
              "not the ordinal: a CPU-only host has no device 0. Elsewhere (arithmetic, `set_device`) the "
              "ordinal `torch.fl.current_device()`, 0 on the CPU."),
    _api("set_device", "torch.fl.set_device", "safe", alias="set_device", takes_device=True,
         note="Only runs where CUDA ran (torch.cuda.set_device raises on a CPU-only host)."),
    _api("synchronize", "torch.fl.synchronize", "safe", alias="synchronize", takes_device=True),
    _api("is_initialized", remedy="Use `torch.fl.is_accelerator()`", alias="is_initialized"),
    _api("init", remedy="Not needed: torch.fl initialises the device on first use", alias="init"),
    _api("device", kind="class", remedy="Use `torch.fl.set_device(...)` or pass `device=` explicitly",
         alias="device", takes_device=True),
    _api("device_of", kind="class", remedy="Use `torch.fl.set_device(x.device)`", alias="device_of"),
    # Memory statistics.
    _api("empty_cache", "torch.fl.empty_cache", "safe", alias="empty_cache"),
    _api("memory_allocated", "torch.fl.memory_allocated", "unsafe", alias="memory_allocated", takes_device=True,
         note=_MEMORY_NOTE),
    _api("max_memory_allocated", "torch.fl.max_memory_allocated", "unsafe", alias="max_memory_allocated",
         takes_device=True, note=_MEMORY_NOTE),
    _api("memory_reserved", "torch.fl.memory_allocated", "unsafe", alias="memory_allocated", takes_device=True,
         note="torch.fl has no reserved-pool figure: allocated memory stands for it."),
    _api("max_memory_reserved", "torch.fl.max_memory_allocated", "unsafe", alias="max_memory_allocated",
         takes_device=True, note="torch.fl has no reserved-pool figure: allocated memory stands for it."),
    _api("reset_peak_memory_stats", "torch.fl.reset_peak_memory_stats", "safe",
         alias="reset_peak_memory_stats", takes_device=True),
    _api("reset_max_memory_allocated", "torch.fl.reset_peak_memory_stats", "safe",
         alias="reset_peak_memory_stats", takes_device=True),
    _api("mem_get_info", "torch.fl.mem_get_info", "safe", alias="mem_get_info", takes_device=True,
         note="Only runs where CUDA ran (torch.cuda.mem_get_info raises on a CPU-only host)."),
    *(_api(name, remedy="Use `torch.fl.memory_allocated()` / `torch.fl.max_memory_allocated()`")
      for name in ("memory_stats", "memory_stats_as_nested_dict", "memory_summary", "memory_snapshot",
                   "memory_cached", "max_memory_cached", "reset_max_memory_cached",
                   "reset_accumulated_memory_stats", "list_gpu_processes", "device_memory_used")),
    _api("set_per_process_memory_fraction",
         remedy="Set the limit in the launch environment (the device description names the allocator)"),
    # Random numbers.
    _api("manual_seed", "torch.fl.manual_seed", "unsafe", alias="manual_seed", note=_SEED_NOTE),
    _api("manual_seed_all", "torch.fl.manual_seed", "unsafe", alias="manual_seed", note=_SEED_NOTE),
    *(_api(name, remedy="Use `torch.fl.manual_seed(seed)` (every device) or `torch.random` (the CPU)",
           alias=name, takes_device=name == "get_rng_state")
      for name in ("seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
                   "get_rng_state_all", "set_rng_state_all")),
    # Properties.
    _api("get_device_name", "torch.fl.get_device_properties", "unsafe", alias="get_device_name",
         takes_device=True, remedy="Replace with `torch.fl.get_device_properties(...).name`",
         note="Rewritten to `torch.fl.get_device_properties(x).name`; the name's format differs per vendor."),
    _api("get_device_properties", alias="get_device_properties", takes_device=True,
         remedy="Use `torch.fl.get_device_properties()` (the same fields on every device)"),
    _api("get_device_capability", remedy="Check the device description (`torch.fl.description()`) instead",
         alias="get_device_capability", takes_device=True),
    _api("is_bf16_supported", alias="is_bf16_supported",
         remedy="Check `torch.fl.description()`'s precision dtypes instead"),
    _api("is_tf32_supported", remedy="Use `torch.set_float32_matmul_precision(\"high\")`: a no-op where "
                                     "there is no TF32"),
    *(_api(name, remedy="No portable equivalent: guard with `if torch.fl.device_type() == \"cuda\":`")
      for name in ("get_arch_list", "get_gencode_flags", "utilization", "temperature", "power_draw",
                   "clock_rate", "ipc_collect", "can_device_access_peer", "cudart", "check_error",
                   "set_sync_debug_mode", "get_sync_debug_mode", "current_blas_handle")),
    # Streams and events.
    _api("Stream", "torch.fl.Stream", "safe", kind="class", alias="Stream", takes_device=True),
    _api("Event", "torch.fl.Event", "safe", kind="class", alias="Event"),
    _api("stream", "torch.fl.stream", "safe", alias="stream"),
    _api("current_stream", alias="current_stream", takes_device=True,
         remedy="Use a `torch.fl.Stream()` and `with torch.fl.stream(s):`"),
    _api("default_stream", alias="current_stream", takes_device=True,
         remedy="Use a `torch.fl.Stream()` and `with torch.fl.stream(s):`"),
    _api("set_stream", remedy="Use `with torch.fl.stream(s):`"),
    _api("ExternalStream", kind="class", remedy="Exchange tensors through DLPack instead of raw streams"),
    _api("StreamContext", kind="class", remedy="Use `with torch.fl.stream(s):`"),
    # Graphs.
    *(_api(name, kind="class" if name == "CUDAGraph" else "function",
           remedy="Use `torch.compile(mode=\"reduce-overhead\")` (graphs where the backend has them), or guard "
                  "with `if torch.fl.device_type() == \"cuda\":`",
           alias="is_current_stream_capturing" if name == "is_current_stream_capturing" else None,
           alias_refuses=name != "is_current_stream_capturing")
      for name in ("CUDAGraph", "graph", "graph_pool_handle", "make_graphed_callables",
                   "is_current_stream_capturing")),
    # Mixed precision (torch.cuda.amp is deprecated since torch 2.4).
    _api("amp.autocast", "torch.autocast", "safe", kind="class", alias="autocast",
         remedy="Replace with `torch.autocast(torch.fl.device_type(), ...)`",
         note="Positional arguments become keywords (torch.autocast takes the device type first)."),
    _api("amp.GradScaler", "torch.amp.GradScaler", "safe", kind="class", alias="GradScaler",
         remedy="Replace with `torch.amp.GradScaler(torch.fl.device_type(), ...)`",
         note="On a CPU-only host a scaler that was enabled now scales by powers of two on the CPU: exact "
              "in float32, so the result is the same unless gradients overflow."),
    _api("amp.custom_fwd", remedy="Use `torch.amp.custom_fwd(device_type=torch.fl.device_type())`"),
    _api("amp.custom_bwd", remedy="Use `torch.amp.custom_bwd(device_type=torch.fl.device_type())`"),
    # Submodules without an equivalent.
    _api("nvtx", kind="module", remedy="Use `torch.profiler.record_function`", alias="nvtx"),
    _api("nccl", kind="module", remedy="Use `torch.distributed` collectives with `torch.fl.dist_backend()`"),
    _api("comm", kind="module", remedy="Use `torch.distributed` collectives with `torch.fl.dist_backend()`"),
    _api("jiterator", kind="module", remedy="Use torch ops or a Triton kernel with a fallback"),
    _api("tunable", kind="module", remedy="No portable equivalent: CUDA/ROCm GEMM tuning"),
    _api("MemPool", kind="class", remedy="No portable equivalent: CUDA caching-allocator pools"),
    _api("CUDAPluggableAllocator", kind="class", remedy="No portable equivalent: CUDA allocator plug-in"),
    # Outside torch.cuda.
    _api("torch.version.cuda", kind="attribute",
         remedy="Ask what you need: `torch.fl.is_accelerator()`, `torch.fl.device_type()`, or the device "
                "description (`torch.fl.description()`)",
         note="None on builds without CUDA; code that compares it decides on CUDA-ness, not on features."),
)

# Legacy typed tensors: torch.cuda.FloatTensor -> dtype (FL103).
CUDA_TENSOR_TYPES: dict[str, str] = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16", "ByteTensor": "uint8", "CharTensor": "int8", "ShortTensor": "int16",
    "IntTensor": "int32", "LongTensor": "int64", "BoolTensor": "bool",
}

CUDA_API: dict[str, CudaAPI] = {entry.name: entry for entry in _ENTRIES}
CUDA_API.update({
    f"torch.cuda.{name}": CudaAPI(
        f"torch.cuda.{name}", "type", remedy=f"Use a `torch.{dtype}` tensor with `device=torch.fl.device()`",
        alias=name)
    for name, dtype in CUDA_TENSOR_TYPES.items()})

# torch.fl facade call -> the torch.cuda names it stands in for (for the facade's docs and the alias).
FACADE: dict[str, tuple[str, ...]] = {}
for _entry in CUDA_API.values():
    if _entry.alias is not None:
        FACADE.setdefault(_entry.alias, ())
        FACADE[_entry.alias] += (_entry.name,)
del _entry

# Submodules whose names are re-exported by torch.cuda (torch.cuda.memory.empty_cache is
# torch.cuda.empty_cache): dropped when looking a name up.
_SUBMODULES = ("memory.", "random.", "streams.", "graphs.", "amp.autocast_mode.", "amp.grad_scaler.")


def lookup(qualname: str) -> CudaAPI | None:
    """The entry for a qualified name (``torch.cuda.memory.empty_cache`` finds ``empty_cache``; an
    attribute of a class or module entry finds the entry: ``torch.cuda.nvtx.range_push`` -> ``nvtx``).
    None for names outside the table (``torch.cuda.<unknown>`` is still CUDA-only: see
    :data:`DEFAULT_REMEDY`)."""
    entry = CUDA_API.get(qualname)
    if entry is not None or not qualname.startswith("torch.cuda."):
        return entry
    rest = qualname[len("torch.cuda."):]
    for prefix in _SUBMODULES:
        if rest.startswith(prefix):
            tail = rest[len(prefix):]
            found = CUDA_API.get(f"torch.cuda.{prefix.split('.')[0]}.{tail}") if prefix.startswith("amp.") \
                else CUDA_API.get(f"torch.cuda.{tail}")
            if found is not None:
                return found
    head = rest.split(".")[0]
    entry = CUDA_API.get(f"torch.cuda.{head}")
    return entry if entry is not None and entry.kind in ("module", "class") else None


def device_replacement(index: str | None) -> str:
    """What a CUDA device string becomes: ``"cuda"`` -> ``torch.fl.device()``, ``"cuda:N"`` ->
    ``torch.fl.device("accN")``; index "?" stands for a computed index (f"cuda:{rank}")."""
    if index is None:
        return "torch.fl.device()"
    return 'torch.fl.device(f"acc{...}")' if index == "?" else f'torch.fl.device("acc{index}")'


# torch.backends.cudnn / torch.backends.cuda --------------------------------------------------------
class BackendFlag(NamedTuple):
    """A CUDA backend setting (``torch.backends.cudnn.benchmark``): the portable switch for the same
    intent, or None when it is CUDA-only tuning (then guarding it is the remedy)."""

    name: str
    portable: str | None
    remedy: str


_GUARD = "Guard it with `if torch.fl.device_type() == \"cuda\":` to say it is CUDA-only tuning"
BACKEND_FLAGS: dict[str, BackendFlag] = {flag.name: flag for flag in (
    BackendFlag("torch.backends.cudnn.deterministic", "torch.use_deterministic_algorithms(True)",
                "Use `torch.use_deterministic_algorithms(True)`"),
    BackendFlag("torch.backends.cudnn.allow_tf32", 'torch.set_float32_matmul_precision("high")',
                "Use `torch.set_float32_matmul_precision(\"high\")`"),
    BackendFlag("torch.backends.cuda.matmul", 'torch.set_float32_matmul_precision("high")',
                "Use `torch.set_float32_matmul_precision(...)`"),
    BackendFlag("torch.backends.cuda.sdp", "torch.nn.attention.sdpa_kernel([...])",
                "Use `torch.nn.attention.sdpa_kernel([...])`, which every backend honours"),
    BackendFlag("torch.backends.cudnn", None, _GUARD),
    BackendFlag("torch.backends.cuda", None, _GUARD),
)}


def backend_flag(qualname: str) -> BackendFlag | None:
    """The entry for a ``torch.backends.cudnn.*`` / ``torch.backends.cuda.*`` name (the most specific
    one: ``torch.backends.cuda.enable_flash_sdp`` finds the ``sdp`` family)."""
    parts = qualname.split(".")
    if len(parts) < 3 or parts[:2] != ["torch", "backends"] or parts[2] not in ("cudnn", "cuda"):
        return None
    if len(parts) > 3:
        last = parts[3]
        family = "sdp" if parts[2] == "cuda" and "sdp" in last else last
        found = BACKEND_FLAGS.get(f"torch.backends.{parts[2]}.{family}")
        if found is not None:
            return found
    return BACKEND_FLAGS[f"torch.backends.{parts[2]}"]
