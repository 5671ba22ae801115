"""What the live dispatcher (or a generated table) says a backend runs natively.

Op names are canonical everywhere in torch-fl (``aten::name.overload``; the base layer's ``_opnames``
spells them, and this module re-exports its `canonical_op_name` and `dispatcher_op_name`).
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

import torch

# (op names live in the base layer, _opnames: every layer reads them; re-exported here)
from .._opnames import _CANONICAL, _DEFAULT_NAMESPACE, canonical_op_name, dispatcher_op_name
from ..errors import DescriptionError

__all__ = [
    "all_aten_ops",
    "backend_loaded",
    "cache_clear",
    "canonical_op_name",
    "composite_ops",
    "dispatcher_op_name",
    "forwarded_ops",
    "installed_version",
    "probe_dtypes",
    "probe_native_ops",
    "read_op_table",
    "structured_delegates",
]


# Candidate dtypes by torch attribute name; getattr skips those an older torch lacks (the floor is 2.4).
_DTYPE_CANDIDATES = (
    "float32", "float64", "float16", "bfloat16",
    "complex32", "complex64", "complex128",
    "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "bool",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
)


# Dispatcher ---------------------------------------------------------------------------------------
_all_aten: tuple[int, list[str], frozenset[str]] = (-1, [], frozenset())


def all_aten_ops() -> list[str]:
    """Every ``aten`` overload this process's dispatcher knows, canonical and sorted (a new list each call).

    Kept until the dispatcher's op count changes: importing an extension can register new overloads at any
    time, and reading the names (~2 ms) is cheaper than spelling and sorting them again (~10 ms)."""
    return list(_aten_ops()[1])


def _aten_ops() -> tuple[int, list[str], frozenset[str]]:
    names = torch._C._dispatch_get_all_op_names()
    global _all_aten
    if _all_aten[0] != len(names):
        prefix = _DEFAULT_NAMESPACE + "::"
        ops = sorted(canonical_op_name(name) for name in names if name.startswith(prefix))
        _all_aten = (len(names), ops, frozenset(ops))
    return _all_aten


@functools.cache
def probe_native_ops(dispatch_key: str) -> frozenset[str]:
    """The aten overloads with a kernel usable on ``dispatch_key`` (e.g. ``"CPU"``).

    The op's own kernels for the key and composite kernels (which run on any backend) count.
    So do torchgen's generated forwarders (autogen'd ``out=`` overloads, and the
    CompositeExplicitAutogradNonFunctional kernel of every structured functional op), which only
    work where their target has a kernel: a key whose backend this build lacks (``CUDA`` on a CPU
    wheel) still reports e.g. ``aten::mm.default``. Probe only the live backend; use a table
    otherwise. A pass over the ~3,100 aten overloads takes about 10 ms, so there is no faster path
    to maintain; the result is memoised per key (see :func:`cache_clear`)."""
    _check_dispatch_key(dispatch_key)
    return frozenset(op for op in all_aten_ops() if has_native_kernel(dispatcher_op_name(op), dispatch_key))


# Kernels registered for these keys run on every backend.
_COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
                   "CompositeExplicitAutogradNonFunctional")


# Composite kernels that decompose onto other ops. The NonFunctional key holds two kinds: torchgen's
# forwarder of a structured op to its out= overload (runs only where the backend has that overload:
# forwarded_ops), and real decompositions PyTorch runs on every backend that has no kernel of its own
# (the *_copy view variants, *_scatter, _trilinear of nn.Bilinear, pixel_shuffle, diag_embed, ...).
_DECOMPOSING_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd")
_NON_FUNCTIONAL = "CompositeExplicitAutogradNonFunctional"


@functools.cache
def composite_ops() -> frozenset[str]:
    """The aten overloads whose kernel decomposes onto other ops on any backend, so that a chip runs
    them natively when it runs what they call (the rule that completes a vendor op table)."""
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    forwarders = structured_delegates()
    return frozenset(op for op in all_aten_ops()
                     if any(has_kernel(dispatcher_op_name(op), key) for key in _DECOMPOSING_KEYS)
                     or (op not in forwarders and has_kernel(dispatcher_op_name(op), _NON_FUNCTIONAL)))


@functools.cache
def is_view_op(bare: str) -> bool:
    """Whether every overload of the bare op `bare` ('aten::transpose') is a view: it returns an alias of an
    input and writes nothing (transpose, permute, as_strided, narrow, ...), reading that op's schemas only."""
    packet = getattr(torch.ops.aten, bare.split("::", 1)[-1], None) if bare.startswith("aten::") else None
    if packet is None:
        return False
    # the dispatcher's overloads (a packet lists TorchScript's list ops too, slice.t), as last read: an op
    # registered later is read again (one read costs ~2 ms; this runs for every op of a dtype table)
    known = _all_aten[2]
    if not known or not any(f"{bare}.{name}" in known for name in packet.overloads()):
        known = _aten_ops()[2]
    overloads = [getattr(packet, name, None) for name in packet.overloads() if f"{bare}.{name}" in known]
    return bool(overloads) and all(o is not None and o.is_view and not o._schema.is_mutable for o in overloads)


@functools.cache
def structured_delegates() -> dict[str, str]:
    """op -> the out= overload its CompositeExplicitAutogradNonFunctional forwarder calls, for the
    structured ops of this torch (``aten::gelu.default`` -> ``aten::gelu.out``), read from the
    ``native_functions.yaml`` the wheel ships ({} when it ships none: no forwarder then counts)."""
    import importlib.util

    spec = importlib.util.find_spec("torchgen")
    if spec is None or spec.origin is None:
        return {}
    path = Path(spec.origin).parent / "packaged/ATen/native/native_functions.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    delegates: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith("- func:"):
            name = line[len("- func:"):].split("(", 1)[0].strip()
        elif line.startswith("  structured_delegate:") and name:
            delegates[canonical_op_name(name)] = canonical_op_name(line.split(":", 1)[1].split("#")[0].strip())
    return delegates


def forwarded_ops(registered: frozenset[str]) -> frozenset[str]:
    """The structured ops (functional and in-place) that run where their out= overload is `registered`:
    PyTorch's generated NonFunctional kernel forwards them to it on any backend."""
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return frozenset(op for op, target in structured_delegates().items() if target in registered
                     and has_kernel(dispatcher_op_name(op), "CompositeExplicitAutogradNonFunctional"))


def installed_version(plugin: str) -> str:
    """Installed version of plugin module `plugin` ('' when built into torch or not installed), from its
    package metadata: importing a plugin claims PyTorch's PrivateUse1 slot, and a broken one would hide
    the real error."""
    if not plugin:
        return ""
    from importlib import metadata

    top = plugin.split(".")[0]
    for dist in (top.replace("_", "-"), top):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    # Not a pip distribution (a vendor install script, say): ask the module only if already loaded.
    import sys

    module = sys.modules.get(top)
    return "" if emulated_plugin(module) else str(getattr(module, "__version__", ""))


def emulated_plugin(module: Any) -> bool:
    """Whether `module` is torch-fl's emulation of a plugin package (routing/emu/plugin.py), not the plugin."""
    return hasattr(module, "__torch_fl_emulation__")


def backend_loaded(desc: Any) -> bool:
    """Whether this process has the description's backend, so that probing its dispatch key is the
    truth: the CPU always; a PrivateUse1 chip when its plugin is imported and owns the slot under the
    chip's name (torch-fl's emulator borrowing the slot is not the plugin); a built-in backend (XPU,
    CUDA, MPS) when torch.<type>.is_available()."""
    import sys

    key = desc.dispatch_key
    if key == "CPU":
        return True
    if key == "PrivateUse1":
        return bool(desc.plugin) and desc.plugin in sys.modules and \
            not emulated_plugin(sys.modules[desc.plugin]) and \
            torch._C._get_privateuse1_backend_name() == desc.device_type
    module = getattr(torch, desc.device_type, None)
    try:
        return bool(module is not None and module.is_available())
    except Exception:  # a backend module that cannot even answer is not loaded
        return False


def has_native_kernel(name: str, dispatch_key: str) -> bool:
    """Whether dispatcher op `name` has its own kernel for `dispatch_key`, or a composite one.

    Asked key by key rather than through the computed table, because the computed table also counts a
    backend fallback (torch-fl's router registers one while routing is active): that is not a kernel
    of the op."""
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return has_kernel(name, dispatch_key) or any(has_kernel(name, key) for key in _COMPOSITE_KEYS)


def _check_dispatch_key(dispatch_key: str) -> None:
    # Checked up front because the per-op query raises a RuntimeError that names no remedy.
    if torch._C._parse_dispatch_key(dispatch_key) is None:
        raise ValueError(f"unknown dispatch key {dispatch_key!r}; use a torch DispatchKey name "
                         "such as 'CPU', 'CUDA', 'MPS' or 'PrivateUse1'")


# Dtypes -------------------------------------------------------------------------------------------
def probe_dtypes(device: str) -> list[str]:
    """The dtype names (``"float32"``, ``"bfloat16"``...) that ``device`` can allocate and add.

    Never raises: a device this process cannot use yields ``[]``."""
    return list(_probe_dtypes_cached(str(device)))


@functools.cache
def _probe_dtypes_cached(device: str) -> tuple[str, ...]:
    try:
        torch.empty(0, device=device)
    except Exception:
        return ()  # no such device here; skip a doomed attempt per dtype
    candidates = (getattr(torch, name, None) for name in _DTYPE_CANDIDATES)
    return tuple(_dtype_name(dt) for dt in candidates
                 if isinstance(dt, torch.dtype) and _can_add(dt, device))


def _can_add(dtype: torch.dtype, device: str) -> bool:
    try:
        # complex32 and some float8 paths warn that support is experimental; the probe only wants yes/no.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = torch.zeros(2, dtype=dtype, device=device)
            torch.add(x, x)
    except Exception:
        return False
    return True


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def cache_clear() -> None:
    """Forget memoised probes (for tests, or after loading an extension that registers kernels)."""
    probe_native_ops.cache_clear()
    composite_ops.cache_clear()
    structured_delegates.cache_clear()
    _probe_dtypes_cached.cache_clear()
    is_view_op.cache_clear()


# Tables -------------------------------------------------------------------------------------------
def read_op_table(path: str | Path) -> tuple[dict[str, str], frozenset[str]]:
    """Read an op table written by ``scripts/gen_op_tables.py``: ``(header, ops)``.

    The header is the leading ``# key: value`` lines; every other non-blank line is one canonical
    op name."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DescriptionError(f"cannot read op table: {exc.strerror}", path=str(path)) from exc
    header: dict[str, str] = {}
    ops: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            _read_header_line(line, header, ops_started=bool(ops))
        elif _CANONICAL.fullmatch(line):
            ops.add(line)
        else:
            raise DescriptionError(f"not a canonical op name: {line!r} (expected 'aten::name.overload'); "
                                   "regenerate the table with scripts/gen_op_tables.py",
                                   path=str(path), line=lineno)
    return header, frozenset(ops)


def _read_header_line(line: str, header: dict[str, str], *, ops_started: bool) -> None:
    # Comments after the op list are allowed but are not metadata.
    key, sep, value = line[1:].strip().partition(":")
    if sep and not ops_started and " " not in key.strip():
        header[key.strip()] = value.strip()
