"""The loaded form of a device description."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from .. import _toml
from .._names import RouteKind

_T = TypeVar("_T")


class _Key(Generic[_T]):
    """A read-only attribute of a Description that is one value of its data: `path` is the schema's key
    ('vendor', 'precision.autocast_dtype')."""

    def __init__(self, path: str, doc: str = "") -> None:
        self.keys = tuple(path.split("."))
        self.__doc__ = doc or f"The description's {path}."

    @overload
    def __get__(self, obj: None, owner: type) -> _Key[_T]: ...
    @overload
    def __get__(self, obj: Description, owner: type) -> _T: ...
    def __get__(self, obj: Description | None, owner: type) -> _Key[_T] | _T:
        if obj is None:
            return self
        value: Any = obj.data
        for key in self.keys:
            value = value[key]
        return value

    def __set__(self, obj: Description, value: Any) -> None:
        raise AttributeError(f"{'.'.join(self.keys)} is read-only: it is the description's data")


@dataclass(frozen=True, eq=False)
class Description:
    """A validated description. `data` holds every schema key (defaults filled in)."""

    data: dict[str, Any]
    path: str
    sha256: str
    builtin: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    # The plugin release line asked for (coverage --plugin-version); None: the installed one.
    plugin_version: str | None = None

    # Identity -------------------------------------------------------------------------------------
    name = _Key[str]("name")
    vendor = _Key[str]("vendor")
    device_type = _Key[str]("device_type")
    dispatch_key = _Key[str]("dispatch_key")
    plugin = _Key[str]("plugin")
    visible_devices_env = _Key[str]("visible_devices_env")
    soc_version = _Key[int]("identity.soc_version",
                            "The vendor's SoC number (identity.soc_version; -1 where the vendor reports none).")

    @property
    def device_name(self) -> str:
        """What the vendor's runtime calls one device of this chip (identity.device_name), else
        '<vendor> <device_type>'."""
        return self.data["identity"]["device_name"] or f"{self.vendor} {self.device_type}".strip()

    @property
    def capability(self) -> tuple[int, int] | None:
        """(major, minor) of identity.capability; None where the chip reports none."""
        text = self.data["identity"]["capability"]
        if not text:
            return None
        major, minor = text.split(".")
        return int(major), int(minor)

    def section(self, name: str) -> dict[str, Any]:
        """A copy-free view of one [section] (do not mutate)."""
        return self.data[name]

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes the device computes: precision.dtypes (the vendor's documentation) and those its own tests
        use beyond them (precision.tested_dtypes): where the two disagree the chip follows its tests."""
        documented = self.data["precision"]["dtypes"]
        return tuple(documented) + tuple(d for d in self.data["precision"]["tested_dtypes"] if d not in documented)

    @property
    def documented_dtypes(self) -> tuple[str, ...]:
        """precision.dtypes alone: the dtypes the vendor's documentation lists."""
        return tuple(self.data["precision"]["dtypes"])

    def dtype_sources(self, op: str | None, dtype: str) -> dict[str, bool]:
        """Which sources say the device computes `dtype` (in `op`, a canonical or bare aten name; None: at all):
        {'documentation': ..., 'tests': ...}. The device follows the tests where they disagree."""
        documented = dtype in self.documented_dtypes
        tested = dtype in self.data["precision"]["tested_dtypes"]
        if op is not None:
            limits = self.documented_op_dtypes()
            found = _op_entry(limits, op)
            documented = documented and (found is None or dtype in found)
            extra = _op_entry(self.data["ops"]["tested_dtypes"], op)
            tested = extra is not None and dtype in extra
        return {"documentation": documented, "tests": tested}

    autocast_dtype = _Key[str]("precision.autocast_dtype")
    collective_backend = _Key[str]("collectives.backend")

    def cache_dir(self) -> Path:
        """The compile cache root of this description, with {name} and ~ expanded."""
        return Path(self.data["compile"]["cache_dir"].replace("{name}", self.name)).expanduser()

    # Operators ------------------------------------------------------------------------------------
    @property
    def native_source(self) -> str:
        """Where the native op set comes from: 'probe', 'file:PATH', 'list', or for a probed chip whose
        backend is not loaded here, 'table PATH (<plugin> <version>: <why that version>)'."""
        native = self.data["ops"]["native"]
        if isinstance(native, list):
            return "list"
        if native == "probe" and self.native_table() is not None:
            table, version, why = self.native_table()  # type: ignore[misc]
            return (f"table {self._relative(table.path)} ({table.plugin} {version or 'all lines'}: {why})")
        return native

    def with_plugin_version(self, version: str | None) -> Description:
        """This description answering for plugin release line `version` (its table's rows for that
        line, even where the plugin is loaded); None: the installed plugin's."""
        return dataclasses.replace(self, _cache={}, plugin_version=version)

    def table_path(self) -> Path | None:
        """The vendor op table named by ops.table, resolved against this file's folder."""
        name = self.data["ops"]["table"]
        if not name:
            return None
        path = Path(name)
        return path if path.is_absolute() else Path(self.path).parent / path

    def native_table(self) -> tuple[Any, str | None, str] | None:
        """(VendorTable, release line, why that line) when the native set is read from ops.table
        rather than probed: the backend is not loaded in this process (offline, emulated, no plugin),
        or a plugin version was asked for. None when probing answers (or there is no table)."""
        if "table" not in self._cache:
            self._cache["table"] = self._resolve_table()
        return self._cache["table"]

    def _resolve_table(self) -> tuple[Any, str | None, str] | None:
        from .probe import backend_loaded
        from .vendor_table import read_vendor_table

        path = self.table_path()
        if path is None or self.data["ops"]["native"] != "probe":
            return None
        if self.plugin_version is None and backend_loaded(self):
            return None
        table = read_vendor_table(path)
        if self.plugin_version is not None:
            version, why = table.select(self.plugin_version, f"plugin version {self.plugin_version} asked for")
        else:
            installed, origin = _installed_version(table, self.plugin)
            version, why = table.select(installed, origin)
        return table, version, why

    def native_ops(self) -> frozenset[str]:
        """The native aten overloads (canonical 'aten::name.overload' names).

        'probe' asks this process's dispatcher for kernels on the dispatch key where that key's
        backend is loaded (the live device, or CPU). Elsewhere the vendor table of ops.table answers:
        the ops its plugin registers in the chosen release line (that exist in this torch), the ops
        with a composite kernel, which decompose onto others on any backend, and the structured ops
        whose out= overload is registered (PyTorch's generated kernel forwards them to it). A probed
        description without a table, asked offline, is an error: its probe would only find the
        composite ops and call a chip 95% native with nothing behind it."""
        if "native" not in self._cache:
            from .._opnames import canonical_op_name
            from .probe import (
                all_aten_ops,
                composite_ops,
                forwarded_ops,
                probe_native_ops,
                read_op_table,
            )

            native = self.data["ops"]["native"]
            if isinstance(native, list):
                ops = frozenset(canonical_op_name(op) for op in native)
            elif native == "probe":
                resolved = self.native_table()
                if resolved is not None:
                    table, version, _ = resolved
                    registered = table.ops(version) & frozenset(all_aten_ops())
                    ops = registered | composite_ops() | forwarded_ops(registered)
                else:
                    from .probe import backend_loaded

                    if not backend_loaded(self):
                        raise self._no_table_error()
                    ops = probe_native_ops(self.dispatch_key)
            else:
                table_file = Path(native[len("file:"):])
                if not table_file.is_absolute():
                    table_file = Path(self.path).parent / table_file
                ops = read_op_table(table_file)[1]
            self._cache["native"] = ops
        return self._cache["native"]

    def explicit_ops(self, kind: str) -> list[str]:
        """ops.translate / ops.fallback / ops.unsupported, plus the vendor table's rows of that route
        (its CPU-fallback list) when the table answers for the chip."""
        listed = list(self.data["ops"][kind])
        resolved = self.native_table()
        if resolved is None:
            return listed
        table, version, _ = resolved
        return listed + sorted(table.ops(version, kind)) if kind == RouteKind.FALLBACK else listed

    def op_dtypes(self) -> dict[str, list[str]]:
        """The per-op dtype limits the device follows: the documented ones (documented_op_dtypes), each widened
        by the dtypes the vendor's own tests run that op in (ops.tested_dtypes)."""
        limits = self.documented_op_dtypes()
        for op, extra in self.data["ops"]["tested_dtypes"].items():
            for name in [n for n in limits if n == op or n.rsplit(".", 1)[0] == op]:
                limits[name] = sorted(set(limits[name]) | set(extra))
        return limits

    def documented_op_dtypes(self) -> dict[str, list[str]]:
        """ops.dtypes (op -> the dtypes it is native for), plus the vendor's documented dtype limits
        from the table when the table answers; the description's own entries win."""
        limits = dict(self.data["ops"]["dtypes"])
        resolved = self.native_table()
        if resolved is None:
            return limits
        from .probe import is_view_op

        # (a view op's documented input dtypes are not a limit: it computes nothing, and the plugin
        # registers it for every dtype; torch_npu's page lists float32 only for as_strided)
        documented = {op: sorted(d) for op, d in resolved[0].dtype_limits.items()
                      if not is_view_op(op.partition(".")[0])}
        return {**documented, **limits}

    # Generations ----------------------------------------------------------------------------------
    generation = _Key[str]("generation", "The product generation this description answers for ('' when it does not "
                                         "say).")

    def takes(self, op: str, dtype: str) -> bool:
        """Whether this description computes `op` (a canonical 'aten::name.overload') in `dtype`:
        precision.dtypes and the op's dtype limits (op_dtypes) allow it. Says nothing of the op set."""
        if dtype not in self.dtypes:
            return False
        found = _op_entry(self.op_dtypes(), op)
        return found is None or dtype in found

    def _no_table_error(self) -> Exception:
        from ..errors import DescriptionError

        return DescriptionError(
            f"'{self.name}' takes its native op set from probing the {self.dispatch_key} dispatch key "
            f"(ops.native = \"probe\"), but {self.plugin or 'its backend'} is not loaded in this process, "
            f"and it names no vendor op table (ops.table) to answer from offline: probing here would "
            f"find only the composite ops. Fix: add ops.table = \"tables/{self.name}.txt\" (written by "
            f"scripts/gen_op_tables.py --vendor from the vendor's registrations; `torchfl docs descriptions`), "
            f"set ops.native to a list or 'file:PATH', or run where the plugin is loaded",
            path=self.path, key="ops.table")

    def _relative(self, path: str) -> str:
        try:
            return str(Path(path).relative_to(Path(self.path).parent))
        except ValueError:
            return path

    # Serialisation --------------------------------------------------------------------------------
    def to_toml(self) -> str:
        """The description as TOML that loads back to an equal description."""
        header = f"# torch-fl device description '{self.name}'" + (f" (from {self.path})" if self.path else "")
        return header + "\n" + _toml.dumps(copy.deepcopy(self.data))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Description) and self.data == other.data

    def __hash__(self) -> int:
        return hash(self.name)


def _installed_version(table: Any, plugin: str) -> tuple[str | None, str]:
    """(version on the table's axis, where it came from) of the installed plugin, read from its
    package metadata without importing it (importing a plugin claims the PrivateUse1 slot)."""
    from .probe import installed_version

    if not plugin:
        return None, "built into torch"
    installed = installed_version(plugin)
    if not installed:
        return None, f"{plugin} is not installed"
    if table.versions_of == "torch":  # the plugin's branches follow torch releases
        import torch

        return torch.__version__, f"{plugin} {installed} installed, built for torch {torch.__version__}"
    return installed, f"{plugin} {installed} installed"


def _op_entry(table: dict[str, Any], op: str) -> Any:
    """`op`'s entry in a per-op table, by its canonical name or its bare one ('aten::mm.default', 'aten::mm')."""
    found = table.get(op)
    return found if found is not None else table.get(op.rsplit(".", 1)[0])
