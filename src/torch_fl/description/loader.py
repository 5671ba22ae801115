"""Load and validate description files; errors name the file, the line, the key and what is allowed."""

from __future__ import annotations

import copy
import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .. import _toml
from .._versions import check_spec
from ..errors import DescriptionError, did_you_mean
from .fallback import parse_switch
from .model import Description
from .schema import (
    BACKEND_DISPATCH_KEYS,
    MAX_MESSAGE,
    MAX_TEXT,
    SCHEMA,
    SCHEMA_VERSION,
    Key,
    backend_dispatch_keys,
    defaults,
)

_NAME = re.compile(r"\A[a-z0-9][a-z0-9_.-]*\Z")  # \Z: "$" also matches before a final newline ("chip\n")
_OP = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$")
_KERNEL_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def find_line(text: str, section: str | None, key: str | None) -> int | None:
    """Best-effort line number of `key` inside `[section]` (or of the section header when key is None)."""
    current: str | None = None
    header_line = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = re.match(r"^\[\s*([^\]]+?)\s*\]", line)
        if header:
            current = header.group(1).replace('"', "").replace(" ", "")
            if current == section:
                header_line = number
            continue
        if current != section or key is None:
            continue
        name = re.match(r'^("([^"]+)"|([A-Za-z0-9_-]+))\s*=', line)
        if name and (name.group(2) or name.group(3)) == key:
            return number
    return header_line if key is None or section is not None else None


class _Validator:
    def __init__(self, text: str, path: str):
        self.text, self.path = text, path

    def fail(self, message: str, section: str | None, key: str | None) -> DescriptionError:
        dotted = f"{section}.{key}" if section and key else (section or key)
        return DescriptionError(message, path=self.path, line=find_line(self.text, section, key),
                                key=dotted)

    def check_value(self, section: str | None, key: str, spec: Key, value: Any) -> Any:
        kind = spec.type
        if kind == "str":
            if not isinstance(value, str):
                raise self.fail(f"must be a string, got {type(value).__name__} {value!r}", section, key)
            if spec.allowed and value not in spec.allowed:
                raise self.fail(f"'{value}' is not allowed; allowed values: {', '.join(spec.allowed)}."
                                + did_you_mean(value, spec.allowed), section, key)
            if spec.pattern and value != "" and not re.fullmatch(spec.pattern, value):
                raise self.fail(f"{value!r} is not {spec.form}", section, key)
            if (section, key) != (None, "name"):  # (the name has its own, stricter check and message)
                self.check_text(section, key, value)
        elif kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(f"must be an integer, got {value!r}", section, key)
            if spec.bounds and not spec.bounds[0] <= value <= spec.bounds[1]:
                low, high = spec.bounds
                shown = value if abs(value) < 10**12 else f"{str(value)[:12]}... ({len(str(abs(value)))} digits)"
                raise self.fail(f"{shown} is out of range: allowed values are integers from {low} to {high}",
                                section, key)
        elif kind == "bool":
            if not isinstance(value, bool):
                raise self.fail(f"must be true or false, got {value!r}", section, key)
        elif kind == "list[str]":
            self.check_list(section, key, spec, value)
        elif kind == "native":
            if isinstance(value, list):
                self.check_list(section, key, spec, value)
                self.check_ops(section, key, value)
            elif not (isinstance(value, str) and (value == "probe" or value.startswith("file:"))):
                raise self.fail(f"must be 'probe', 'file:PATH' or a list of op names, got {value!r}",
                                section, key)
        elif kind.startswith("table["):
            if not isinstance(value, dict):
                raise self.fail(f"must be a table, got {value!r}", section, key)
            for item_key, item in value.items():
                self.check_table_item(section, key, spec, item_key, item)
        return value

    def check_text(self, section: str | None, key: str, value: str) -> None:
        """Every string value is printable text of bounded length, and blank only when empty: these values
        reach paths, messages, torch.compile and the environment as they are."""
        limit = MAX_MESSAGE if key.endswith("message") else MAX_TEXT
        if len(value) > limit:
            raise self.fail(f"is {len(value)} characters long ({value[:40]!r}...); at most {limit}", section, key)
        bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
        if bad is not None:
            raise self.fail(f"{value[:80]!r} holds the control character {bad!r}; write one line of printable text",
                            section, key)
        if value and not value.strip():
            raise self.fail(f"{value!r} is blank; write '' for none", section, key)

    def check_list(self, section: str | None, key: str, spec: Key, value: Any) -> None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"must be a list of strings, got {value!r}", section, key)
        for item in value:
            if spec.pattern and not re.fullmatch(spec.pattern, item):
                raise self.fail(f"{item!r} is not {spec.form}", section, key)
            self.check_text(section, key, item)
            if spec.item_allowed and item not in spec.item_allowed:
                raise self.fail(f"'{item}' is not allowed; allowed values: {', '.join(spec.item_allowed)}."
                                + did_you_mean(item, spec.item_allowed), section, key)

    def check_ops(self, section: str | None, key: str, ops: list[str]) -> None:
        for op in ops:
            if not _OP.match(op):
                raise self.fail(f"'{op}' is not an operator name; write 'aten::name' (every overload) or "
                                f"'aten::name.overload'", section, key)

    def check_table_item(self, section: str | None, key: str, spec: Key, item_key: str, item: Any) -> None:
        where = f"{section}.{key}"
        if spec.type == "table[tolerance]":
            if spec.item_allowed and item_key not in spec.item_allowed:
                raise self.fail(f"'{item_key}' is not a dtype; allowed: {', '.join(spec.item_allowed)}."
                                + did_you_mean(item_key, spec.item_allowed), where, item_key)
            if not spec.item_allowed and not _OP.match(item_key):
                raise self.fail(f"'{item_key}' is not an operator name ('aten::name[.overload]')",
                                where, item_key)
            if not isinstance(item, dict) or set(item) - {"rtol", "atol"} or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in item.values()):
                raise self.fail("must be a table like { rtol = 1e-3, atol = 1e-5 } with non-negative numbers",
                                where, item_key)
            return
        if not _OP.match(item_key):
            raise self.fail(f"'{item_key}' is not an operator name ('aten::name[.overload]')", where, item_key)
        if spec.type == "table[list[str]]":
            self.check_list(where, item_key, spec, item)
        elif spec.type == "table[str]" and not (isinstance(item, str) and _KERNEL_REF.match(item)):
            raise self.fail(f"must be an import path 'package.module:function', got {item!r}", where, item_key)

    def validate(self, raw: dict[str, Any]) -> dict[str, Any]:
        version = raw.get("schema")
        if not isinstance(version, int) or isinstance(version, bool):
            raise self.fail(f"every description starts with 'schema = {SCHEMA_VERSION}'; "
                            f"got {version!r}", None, "schema")
        if version > SCHEMA_VERSION:
            from .._version import __version__
            raise self.fail(
                f"this file uses description schema {version}, but torch-fl {__version__} reads schema "
                f"{SCHEMA_VERSION} at most. Upgrade torch-fl (pip install -U torch-fl) to load it.",
                None, "schema")
        if version < 1:
            raise self.fail(f"schema {version} does not exist; the first version is 1", None, "schema")
        data = defaults()
        for name, value in raw.items():
            if isinstance(value, dict) and name in SCHEMA:
                self.merge_section(name, value, data[name])
            elif name in SCHEMA[None]:
                data[name] = self.check_value(None, name, SCHEMA[None][name], value)
            else:
                known = [k for k in SCHEMA if k] + list(SCHEMA[None])
                raise self.fail(f"unknown key '{name}'." + did_you_mean(name, known)
                                + f" Known keys: {', '.join(sorted(known))}.", None, name)
        for key, spec in SCHEMA[None].items():
            if spec.required and (key not in raw or raw[key] == ""):
                raise self.fail(f"required key '{key}' is missing ({spec.help})", None, key)
        if not _NAME.match(data["name"]):
            raise self.fail(f"{data['name']!r} is not a valid name: use lowercase letters, digits, '-', "
                            f"'_' or '.'", None, "name")
        key = data["dispatch_key"]
        if key and key not in BACKEND_DISPATCH_KEYS and key not in backend_dispatch_keys():
            keys = backend_dispatch_keys()
            raise self.fail(f"{key!r} is not a backend dispatch key of torch; allowed values: {', '.join(keys)}."
                            + did_you_mean(key, keys), None, "dispatch_key")
        for key in ("torch", "plugin", "runtime", "python"):
            problem = check_spec(data["compat"][key])
            if problem:
                raise self.fail(problem, "compat", key)
        for key in ("translate", "fallback", "unsupported"):
            self.check_ops("ops", key, data["ops"][key])
        switch = data["ops"]["vendor_fallback_env"]
        if switch and parse_switch(switch) is None:
            raise self.fail(f"'{switch}' is not NAME=VALUE: write the vendor's variable and the value that flips "
                            f"ops.vendor_fallback, e.g. 'ENABLE_FALLBACK_TO_CPU=0' (VALUE: 1, true, yes, on, 0, "
                            f"false, no, off or an integer)", "ops", "vendor_fallback_env")
        if data["precision"]["autocast_dtype"] not in data["precision"]["dtypes"]:
            raise self.fail(f"autocast dtype '{data['precision']['autocast_dtype']}' is not in "
                            f"precision.dtypes", "precision", "autocast_dtype")
        return data

    def check_ops_exist(self, raw: dict[str, Any]) -> None:
        """The aten ops this file names (ops.translate/fallback/unsupported, the [ops.dtypes], [ops.kernels]
        and [precision.op_tolerances] entries) exist in this torch: a misspelt one would do nothing,
        silently. Asked of the dispatcher of the loaded torch (its op list costs ~10 ms once); where torch
        is not loaded (no command that reads descriptions runs without it) the names are taken as written,
        and FL_ROUTE's check at activation still holds. ops.native lists are not checked: a probe written
        by another torch names ops this one may lack, and a native op that does not exist routes nothing."""
        import sys

        if sys.modules.get("torch") is None:
            return
        ops, precision = raw.get("ops", {}), raw.get("precision", {})
        for key in ("translate", "fallback", "unsupported"):
            for op in ops.get(key, []):
                self.check_op_exists(op, "ops", key)
        for section, table in (("ops.dtypes", ops.get("dtypes", {})), ("ops.kernels", ops.get("kernels", {})),
                               ("precision.op_tolerances", precision.get("op_tolerances", {}))):
            for op in table:
                self.check_op_exists(op, section, op)

    def check_op_exists(self, op: str, section: str, key: str) -> None:
        from .. import _env

        namespace = op.partition("::")[0]
        if namespace != "aten":  # a custom op's library may register it later (at the plugin's import)
            return
        full, bases = _env._aten_names()
        base, _, overload = op.partition(".")
        if op in _builtin_ops():  # a copy of a built-in (describe npu-910 > mine.toml) loads as it was
            return
        if base not in bases:
            hint = _env._suggest(base, tuple(sorted(bases)))  # gleu -> gelu, as FL_ROUTE's check says
            raise self.fail(f"'{op}' is not an aten operator of this torch.{hint} Fix: correct the name or "
                            f"remove it", section, key)
        if overload and overload != "default" and op not in full:
            overloads = sorted(n.split(".", 1)[1] for n in full if n.startswith(base + "."))
            raise self.fail(f"'{op}' is not an overload of {base}; allowed overloads: "
                            f"{', '.join(['default', *overloads])}.{did_you_mean(overload, overloads)}",
                            section, key)

    def merge_section(self, section: str, values: dict[str, Any], target: dict[str, Any]) -> None:
        keys = SCHEMA[section]
        for key, value in values.items():
            if key not in keys:
                raise self.fail(f"unknown key '{key}' in [{section}]." + did_you_mean(key, keys)
                                + f" Known keys: {', '.join(keys)}.", section, key)
            target[key] = self.check_value(section, key, keys[key], value)


@functools.cache
def _builtin_ops() -> frozenset[str]:
    """The op names the built-in descriptions' own files give (their vendors' names, some of another
    torch's): read from the files, not the registry, which may be discovering the file being checked."""
    names: set[str] = set()
    for path in (Path(__file__).parent / "builtin").glob("*.toml"):
        raw = _toml.loads(_toml.read_text(path))
        ops, precision = raw.get("ops", {}), raw.get("precision", {})
        for key in ("translate", "fallback", "unsupported"):
            names.update(ops.get(key, []))
        for table in (ops.get("dtypes", {}), ops.get("kernels", {}), precision.get("op_tolerances", {})):
            names.update(table)
    return frozenset(names)


def read_raw(text: str, path: str) -> dict[str, Any]:
    """The TOML of a description file, unvalidated (errors name the file and the line)."""
    try:
        return _toml.loads(text)
    except _toml.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        raise DescriptionError(f"not valid TOML: {exc}", path=path,
                               line=int(line.group(1)) if line else None) from None
    except (ValueError, RecursionError) as exc:  # an integer over Python's digit limit, absurd nesting
        raise DescriptionError(f"not a usable TOML file: {exc}", path=path) from None


def parse(text: str, path: str = "<string>", *, builtin: bool = False,
          bases: Mapping[str, Description] | None = None, raw: dict[str, Any] | None = None) -> Description:
    """Parse and validate description text; `path` is used in error messages and for relative files.
    `raw`: the text's TOML when the caller has read it already (read_raw; discovery reads each file's
    TOML once, not twice).

    A file with ``extends = "NAME"`` starts from description NAME (looked up in `bases`, by default the
    discovered descriptions) and replaces the keys it sets (see `extend`)."""
    own = raw = read_raw(text, path) if raw is None else raw
    validator = _Validator(text, path)
    if raw.get("extends", "") != "":
        raw = extend(_base(validator, raw["extends"], path, bases), raw, path)
    data = validator.validate(raw)
    if not builtin:  # built-ins are written from vendor registrations of several torch versions
        validator.check_ops_exist(own)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Description(data=data, path=path, sha256=digest, builtin=builtin)


# The descriptions a file's `extends` names by default: the registry's discovered ones. The registry, which
# imports this module, sets it (a hook, so that the loader does not import the registry back).
default_bases: Callable[[], Mapping[str, Description]] | None = None


def _base(validator: _Validator, name: Any, path: str, bases: Mapping[str, Description] | None) -> Description:
    if not isinstance(name, str):
        raise validator.fail(f"must be the name of a description, got {name!r}", None, "extends")
    if bases is None:
        bases = default_bases() if default_bases is not None else {}
    base = bases.get(name)
    if base is None:
        raise validator.fail(f"extends '{name}', which is not a known description.{did_you_mean(name, bases)} "
                             f"Known: {', '.join(sorted(bases))}.", None, "extends")
    if base.path == path:
        raise validator.fail(f"extends '{name}', which is this file itself", None, "extends")
    return base


# Tables whose entries merge with the extended description's (this file's entries win); every other
# key, lists included, replaces the extended description's value.
_MERGED_TABLES = {("ops", "dtypes"), ("ops", "kernels"), ("precision", "tolerances"), ("precision", "op_tolerances")}


def extend(base: Description, raw: dict[str, Any], path: str) -> dict[str, Any]:
    """The raw keys of a file that extends `base`: base's (validated) keys, with the file's replacing
    them, key by key inside each [section]; [ops.dtypes], [ops.kernels] and the tolerance tables merge
    entry by entry. Paths relative to base's file (ops.table, ops.native = "file:...") stay pointing
    at base's files when this file lives elsewhere."""
    merged: dict[str, Any] = copy.deepcopy(base.data)
    _anchor_paths(merged, base, path)
    for name, value in raw.items():
        target = merged.get(name)
        if isinstance(value, dict) and isinstance(target, dict):
            for key, item in value.items():
                if (name, key) in _MERGED_TABLES and isinstance(item, dict) and isinstance(target.get(key), dict):
                    target[key] = {**target[key], **item}
                else:
                    target[key] = item
        else:
            merged[name] = value
    merged["schema"] = raw.get("schema")  # the file's own: every file says which schema it is written in
    return merged


def _anchor_paths(data: dict[str, Any], base: Description, path: str) -> None:
    here, there = Path(path).parent, Path(base.path).parent
    if here == there:
        return
    ops = data["ops"]
    if ops["table"] and not Path(ops["table"]).is_absolute():
        ops["table"] = str(there / ops["table"])
    native = ops["native"]
    if isinstance(native, str) and native.startswith("file:") and not Path(native[5:]).is_absolute():
        ops["native"] = "file:" + str(there / native[5:])


def load(path: str | Path, *, builtin: bool = False, bases: Mapping[str, Description] | None = None) -> Description:
    """Load one description file (`bases`: where a file's `extends` looks, see `parse`)."""
    path = Path(path)
    return parse(read_text(path), str(path), builtin=builtin, bases=bases)


def read_text(path: Path) -> str:
    """A description file's text (errors name the file)."""
    try:
        return _toml.read_text(path)
    except OSError as exc:
        raise DescriptionError(f"cannot read the file: {exc.strerror or exc}", path=str(path)) from None
    except _toml.TextDecodeError as exc:
        raise DescriptionError(f"not a description file: {exc}", path=str(path)) from None
