"""Vendor op tables: what a chip's plugin registers, per plugin version, from the vendor's own files.

``scripts/gen_op_tables.py --vendor CHIP`` writes one table per chip (``builtin/tables/npu.txt``...)
from the vendor's public registrations (Ascend op-plugin and torch_npu, Cambricon torch_mlu, Moore
Threads torch_musa, Intel torch-xpu-ops). A table is a header of ``# key: value`` lines (the source
repositories and commits, the plugin versions it covers) and one row per aten overload::

    aten::abs.default                        registered in every version of the table
    aten::foo.default versions=2.7,2.8       registered in those versions only
    aten::linalg_eig.default route=fallback  the vendor runs it on the CPU

A description names its table with ``ops.table``; :meth:`VendorTable.select` picks the version (the
installed plugin's, else the newest) and :meth:`VendorTable.ops` gives that version's rows.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._names import RouteKind
from ..errors import DescriptionError

__all__ = ["VendorTable", "probe_vs_table", "read_vendor_table", "version_key"]

_ROW = re.compile(r"^([A-Za-z_]\w*::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)((?:\s+\w+=\S+)*)$")
_VERSION = re.compile(r"^\d+(\.\d+)*$")
TABLE_ROUTES = ("native", "fallback")


def version_key(version: str) -> tuple[int, ...]:
    """'2.10' sorts after '2.9'."""
    return tuple(int(part) for part in version.split("."))


def major_minor(version: str) -> str:
    """'2.5.1.post3' or '2.5.1+cpu' -> '2.5' (release lines are major.minor)."""
    parts = re.findall(r"\d+", version.split("+", 1)[0])[:2]
    return ".".join(parts)


@dataclass(frozen=True)
class VendorTable:
    path: str
    header: dict[str, str]
    versions: tuple[str, ...]  # release lines the table covers, oldest first ('' : one line)
    rows: dict[str, tuple[str, frozenset[str] | None]]  # op -> (route, versions; None = all)
    dtype_limits: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)  # bare name -> dtypes

    @property
    def plugin(self) -> str:
        return self.header.get("plugin", "")

    @property
    def versions_of(self) -> str:
        return self.header.get("versions-of", "")

    def sources(self) -> list[str]:
        return [value for key, value in sorted(self.header.items()) if key.startswith("source-")]

    def select(self, wanted: str | None, origin: str = "") -> tuple[str | None, str]:
        """(release line, why it was chosen) for `wanted` ('2.5', '2.5.1'; None: nothing installed)."""
        if not self.versions:
            return None, "the table has one release line"
        newest = self.versions[-1]
        if wanted is None:
            return newest, f"the newest in the table ({origin or 'no plugin version given'})"
        line = major_minor(wanted)
        if line in self.versions:
            return line, origin or f"plugin version {wanted} asked for"
        if not _VERSION.match(line or "x"):
            raise DescriptionError(f"plugin version {wanted!r} is not a version like 2.5 or 2.5.1; the table "
                                   f"covers {', '.join(self.versions)}", path=self.path)
        older = [v for v in self.versions if version_key(v) <= version_key(line)]
        chosen = older[-1] if older else self.versions[0]
        return chosen, (f"{origin or 'asked for ' + wanted}; the table has no {line} rows, so the "
                        f"{'nearest older' if older else 'oldest'} line {chosen} is used")

    def ops(self, version: str | None, route: RouteKind = RouteKind.NATIVE) -> frozenset[str]:
        """The ops of `route` registered in release line `version` (None: every row of the route)."""
        return frozenset(op for op, (kind, versions) in self.rows.items()
                         if kind == route and (version is None or versions is None or version in versions))

    def changes(self, version: str | None) -> dict[str, str]:
        """op -> how its native registration varies across the table's release lines, for the ops
        not registered in every line: 'native from 2.7' (added after `version`), 'native in 2.1-2.6
        (not in 2.7)' (not in `version`), or 'native in 2.1-2.3, 2.6-2.7' (in `version`, not in all)."""
        out: dict[str, str] = {}
        for op, (kind, versions) in self.rows.items():
            if kind != RouteKind.NATIVE or versions is None or set(versions) == set(self.versions):
                continue
            first = min(versions, key=version_key)
            if version is not None and version not in versions:
                out[op] = (f"native from {first}" if version_key(first) > version_key(version) and
                           self._spans(versions) == self._spans(self._from(first)) else
                           f"native in {self._spans(versions)} (not in {version})")
            else:
                out[op] = f"native in {self._spans(versions)}"
        return out

    def _from(self, first: str) -> set[str]:
        return {v for v in self.versions if version_key(v) >= version_key(first)}

    def _spans(self, versions: frozenset[str] | set[str]) -> str:
        """'2.1-2.3, 2.6-2.7': runs of consecutive release lines of this table."""
        runs: list[list[str]] = []
        for v in self.versions:
            if v in versions:
                if runs and runs[-1][-1] == self._previous(v):
                    runs[-1].append(v)
                else:
                    runs.append([v])
        return ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)

    def _previous(self, version: str) -> str | None:
        index = self.versions.index(version)
        return self.versions[index - 1] if index else None


def read_vendor_table(path: str | Path) -> VendorTable:
    """Read a table written by ``scripts/gen_op_tables.py --vendor``; errors name the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DescriptionError(f"cannot read vendor op table: {exc.strerror}; regenerate it with "
                               f"scripts/gen_op_tables.py --vendor {path.stem} (`torchfl docs descriptions`)",
                               path=str(path)) from None
    header: dict[str, str] = {}
    rows: dict[str, tuple[str, frozenset[str] | None]] = {}
    limits: dict[str, frozenset[str]] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].strip().partition(":")
            if sep and not rows and " " not in key.strip():
                header[key.strip()] = value.strip()
            continue
        op, row = _row(line, path, lineno)
        if row[0] == "dtypes":
            limits[op] = row[1] or frozenset()
        else:
            rows[op] = row
    declared = header.get("plugin-versions", "")
    versions = tuple(v for v in declared.split() if _VERSION.match(v))
    if "ops" not in header:
        raise DescriptionError("not a vendor op table: its header has no 'ops:' line; regenerate it with "
                               "scripts/gen_op_tables.py --vendor", path=str(path))
    for op, (_, row_versions) in rows.items():
        if row_versions is not None and not row_versions <= set(versions):
            raise DescriptionError(f"row {op} names versions {sorted(row_versions - set(versions))} that the "
                                   f"header's plugin-versions ({declared}) lacks", path=str(path))
    return VendorTable(str(path), header, tuple(sorted(versions, key=version_key)), rows, limits)


def _row(line: str, path: Path, lineno: int) -> tuple[str, tuple[str, frozenset[str] | None]]:
    match = _ROW.match(line)
    if not match:
        raise DescriptionError(f"not a vendor table row: {line!r} (expected 'aten::name.overload "
                               "[route=fallback] [versions=2.1,2.2]'); regenerate the table with "
                               "scripts/gen_op_tables.py --vendor", path=str(path), line=lineno)
    fields = dict(item.split("=", 1) for item in match.group(2).split())
    if "." not in match.group(1).split("::", 1)[1]:  # a bare name: a dtype limit of every overload
        dtypes = fields.pop("dtypes", None)
        if dtypes is None or fields:
            raise DescriptionError(f"row {match.group(1)}: a name without an overload carries only "
                                   f"'dtypes=...' (a documented dtype limit), got {line!r}",
                                   path=str(path), line=lineno)
        return match.group(1), ("dtypes", frozenset(dtypes.split(",")))
    route = fields.pop("route", RouteKind.NATIVE)
    versions = fields.pop("versions", None)
    if route not in TABLE_ROUTES or fields:
        raise DescriptionError(f"row {match.group(1)}: unknown field or route in {line!r}; routes: "
                               f"{', '.join(TABLE_ROUTES)}; fields: route, versions", path=str(path), line=lineno)
    return match.group(1), (route, None if versions is None else frozenset(versions.split(",")))


def probe_vs_table(desc: Any, limit: int = 8) -> dict[str, Any] | None:
    """Where this process's dispatcher (the truth, with the plugin loaded on the live device) and the
    description's vendor table disagree, for `torchfl doctor`; None when the table answers (no live
    backend) or the description names none."""
    from .probe import all_aten_ops, backend_loaded, installed_version, probe_native_ops

    path = desc.table_path()
    if path is None or desc.native_source != "probe" or not backend_loaded(desc):
        return None
    table = read_vendor_table(path)
    installed = installed_version(desc.plugin) or None
    version, why = table.select(installed, f"{desc.plugin} {installed} loaded" if installed else "")
    registered = table.ops(version) & frozenset(all_aten_ops())
    probed = probe_native_ops(desc.dispatch_key)
    missing = sorted(registered - probed)  # the table says registered, the dispatcher has no kernel
    extra = sorted(probed - registered - table.ops(None))  # kernels the table does not list in any line
    return {"table": str(path), "version": version, "why": why, "registered": len(registered),
            "table_not_probed": len(missing), "examples_table_not_probed": missing[:limit],
            "probed_not_in_table": len(extra), "examples_probed_not_in_table": extra[:limit]}
