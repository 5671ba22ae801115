"""The loaded form of a device description."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _toml


@dataclass(frozen=True, eq=False)
class Description:
    """A validated description. `data` holds every schema key (defaults filled in)."""

    data: dict[str, Any]
    path: str
    sha256: str
    builtin: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    # Identity -------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def vendor(self) -> str:
        return self.data["vendor"]

    @property
    def device_type(self) -> str:
        return self.data["device_type"]

    @property
    def dispatch_key(self) -> str:
        return self.data["dispatch_key"]

    @property
    def plugin(self) -> str:
        return self.data["plugin"]

    @property
    def visible_devices_env(self) -> str:
        return self.data["visible_devices_env"]

    def section(self, name: str) -> dict[str, Any]:
        """A copy-free view of one [section] (do not mutate)."""
        return self.data[name]

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(self.data["precision"]["dtypes"])

    @property
    def autocast_dtype(self) -> str:
        return self.data["precision"]["autocast_dtype"]

    @property
    def collective_backend(self) -> str:
        return self.data["collectives"]["backend"]

    def cache_dir(self) -> Path:
        """The compile cache root of this description, with {name} and ~ expanded."""
        return Path(self.data["compile"]["cache_dir"].replace("{name}", self.name)).expanduser()

    # Operators ------------------------------------------------------------------------------------
    @property
    def native_source(self) -> str:
        """Where the native op set comes from: 'probe', 'file:PATH' or 'list'."""
        native = self.data["ops"]["native"]
        return "list" if isinstance(native, list) else native

    def native_ops(self) -> frozenset[str]:
        """The native aten overloads (canonical 'aten::name.overload' names).

        'probe' asks this process's dispatcher for kernels on the dispatch key; it is only meaningful
        where that key's backend is loaded (the live device, or CPU)."""
        if "native" not in self._cache:
            from .probe import canonical_op_name, probe_native_ops, read_op_table

            native = self.data["ops"]["native"]
            if isinstance(native, list):
                ops = frozenset(canonical_op_name(op) for op in native)
            elif native == "probe":
                ops = probe_native_ops(self.dispatch_key)
            else:
                table = Path(native[len("file:"):])
                if not table.is_absolute():
                    table = Path(self.path).parent / table
                ops = read_op_table(table)[1]
            self._cache["native"] = ops
        return self._cache["native"]

    # Serialisation --------------------------------------------------------------------------------
    def to_toml(self) -> str:
        """The description as TOML that loads back to an equal description."""
        header = f"# torch-fl device description '{self.name}'" + (f" (from {self.path})" if self.path else "")
        return header + "\n" + _toml.dumps(copy.deepcopy(self.data))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Description) and self.data == other.data

    def __hash__(self) -> int:
        return hash(self.name)
