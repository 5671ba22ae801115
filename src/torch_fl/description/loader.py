"""Load and validate description files; errors name the file, the line, the key and what is allowed."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from .. import _toml
from .._versions import check_spec
from ..errors import DescriptionError, did_you_mean
from .model import Description
from .schema import SCHEMA, SCHEMA_VERSION, Key, defaults

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
        elif kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(f"must be an integer, got {value!r}", section, key)
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

    def check_list(self, section: str | None, key: str, spec: Key, value: Any) -> None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"must be a list of strings, got {value!r}", section, key)
        for item in value:
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
        for key in ("torch", "plugin", "runtime", "python"):
            problem = check_spec(data["compat"][key])
            if problem:
                raise self.fail(problem, "compat", key)
        for key in ("translate", "fallback", "unsupported"):
            self.check_ops("ops", key, data["ops"][key])
        if data["precision"]["autocast_dtype"] not in data["precision"]["dtypes"]:
            raise self.fail(f"autocast dtype '{data['precision']['autocast_dtype']}' is not in "
                            f"precision.dtypes", "precision", "autocast_dtype")
        return data

    def merge_section(self, section: str, values: dict[str, Any], target: dict[str, Any]) -> None:
        keys = SCHEMA[section]
        for key, value in values.items():
            if key not in keys:
                raise self.fail(f"unknown key '{key}' in [{section}]." + did_you_mean(key, keys)
                                + f" Known keys: {', '.join(keys)}.", section, key)
            target[key] = self.check_value(section, key, keys[key], value)


def parse(text: str, path: str = "<string>", *, builtin: bool = False) -> Description:
    """Parse and validate description text; `path` is used in error messages and for relative files."""
    try:
        raw = _toml.loads(text)
    except _toml.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        raise DescriptionError(f"not valid TOML: {exc}", path=path,
                               line=int(line.group(1)) if line else None) from None
    except (ValueError, RecursionError) as exc:  # an integer over Python's digit limit, absurd nesting
        raise DescriptionError(f"not a usable TOML file: {exc}", path=path) from None
    data = _Validator(text, path).validate(raw)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Description(data=data, path=path, sha256=digest, builtin=builtin)


def load(path: str | Path, *, builtin: bool = False) -> Description:
    """Load one description file."""
    path = Path(path)
    try:
        text = _toml.read_text(path)
    except OSError as exc:
        raise DescriptionError(f"cannot read the file: {exc.strerror or exc}", path=str(path)) from None
    except _toml.TextDecodeError as exc:
        raise DescriptionError(f"not a description file: {exc}", path=str(path)) from None
    return parse(text, str(path), builtin=builtin)
