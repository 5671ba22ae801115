"""The string values of YAML, JSON and TOML config files, with their key paths and positions, for the
rules that read config files (FL107, FL504: ``device: cuda``, ``"backend": "nccl"``).

A line scan, not a parser: ``torchfl scan`` runs without PyYAML (not a dependency) and must report
exact lines and columns, which ``json`` and ``tomllib`` do not give. Each scanner tracks the path of
keys above a value (YAML by indentation, JSON by braces, TOML by table headers) and yields scalar
strings only: what a config sets a device or a backend to. Lists of values, multi-line strings,
anchors and interpolations (``${oc.env:DEVICE,cuda}``) are not values here. Stdlib only.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from typing import NamedTuple

CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")
# Bigger files are data (tokenizers, annotations, op tables), not configs someone edits: not read.
MAX_CONFIG_BYTES = 1 << 20


class Value(NamedTuple):
    """A string value: the keys above it (outermost first), its text (unquoted), and where its source
    text is (quotes included): 1-based line, 0-based start and end columns in characters."""

    path: tuple[str, ...]
    text: str
    line: int
    start: int
    end: int


def config_values(text: str, suffix: str) -> Iterator[Value]:
    """The string values of a config file's text, by its suffix (one of CONFIG_SUFFIXES)."""
    if suffix == ".json":
        return _json(text)
    if suffix == ".toml":
        return _toml(text)
    return _yaml(text)


def _unquote(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'":
        return token[1:-1]
    return token


# YAML ---------------------------------------------------------------------------------------------
_YAML_ITEM = re.compile(r"(?P<indent> *)(?P<dash>(?:- +)*)(?P<key>\"[^\"]*\"|'[^']*'|[^\s#'\"{\[&*!|>-][^:#]*?|-[^\s:#][^:#]*?)"
                        r" *:(?: +(?P<value>.*?))? *$")
_YAML_FLOW = re.compile(r"(?P<key>[\w.-]+|\"[^\"]*\"|'[^']*') *: *(?P<value>\"[^\"]*\"|'[^']*'|[^,}\s]+)")
_BLOCK_SCALAR = re.compile(r"[|>][-+0-9]*")


def _yaml_scalar(value: str) -> tuple[str, int] | None:
    """A plain or quoted scalar at the start of `value` (comment removed): (its source text, length),
    or None for what is not one (a flow collection, an alias, a tag, an interpolation)."""
    if value[:1] in ("\"", "'"):
        end = value.find(value[0], 1)
        return None if end < 0 else (value[:end + 1], end + 1)
    if not value or value[0] in "[{&*!|>%@`#":
        return None
    token = value.split(" #", 1)[0].rstrip()
    return (token, len(token)) if token and "${" not in token else None


def _yaml(text: str) -> Iterator[Value]:
    stack: list[tuple[int, str]] = []  # (indent of the key, key)
    block = -1  # inside a block scalar (`key: |`): lines indented more than this are its text
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if block >= 0:
            if not stripped or indent > block:
                continue
            block = -1
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith(("---", "...")):
            stack.clear()
            continue
        match = _YAML_ITEM.match(line)
        if match is None:
            continue
        column = indent + len(match.group("dash"))
        key = _unquote(match.group("key").strip())
        while stack and stack[-1][0] >= column:
            stack.pop()
        path = (*(k for _, k in stack), key)
        stack.append((column, key))
        value = match.group("value")
        if not value:
            continue
        start = match.start("value")
        if _BLOCK_SCALAR.fullmatch(value.split(" #", 1)[0].strip()):
            block = column
            continue
        if value.startswith("{"):
            for pair in _YAML_FLOW.finditer(value):
                token = pair.group("value")
                yield Value((*path, _unquote(pair.group("key"))), _unquote(token), number,
                            start + pair.start("value"), start + pair.end("value"))
            continue
        scalar = _yaml_scalar(value)
        if scalar is not None:
            token, length = scalar
            yield Value(path, _unquote(token), number, start, start + length)


# JSON ---------------------------------------------------------------------------------------------
_JSON_TOKEN = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|[{}\[\]:,]")


def _json(text: str) -> Iterator[Value]:
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    # Per open container: its key (None for an array's items) and whether it is an object.
    stack: list[tuple[str | None, bool]] = []
    key: str | None = None
    tokens = list(_JSON_TOKEN.finditer(text))
    for i, token in enumerate(tokens):
        kind = token.group()
        if kind in ("{", "["):
            stack.append((key, kind == "{"))
            key = None
        elif kind in ("}", "]"):
            if stack:
                stack.pop()
            key = None
        elif kind == ",":
            key = None
        elif kind != ":":
            in_object = bool(stack) and stack[-1][1]
            if in_object and key is None and i + 1 < len(tokens) and tokens[i + 1].group() == ":":
                key = _json_string(kind)
            elif in_object and key is not None:
                line = bisect.bisect_right(starts, token.start())
                base = starts[line - 1]
                path = (*(k for k, _ in stack if k is not None), key)
                yield Value(path, _json_string(kind), line, token.start() - base, token.end() - base)
                key = None


def _json_string(token: str) -> str:
    body = token[1:-1]
    if "\\" not in body:
        return body
    import json

    try:
        return str(json.loads(token))
    except ValueError:
        return body


# TOML ---------------------------------------------------------------------------------------------
_TOML_KEY = r"(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')"
_TOML_DOTTED = rf"{_TOML_KEY}(?:\s*\.\s*{_TOML_KEY})*"
_TOML_HEADER = re.compile(rf"\s*\[\[?\s*(?P<key>{_TOML_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_TOML_PAIR = re.compile(rf"(?P<key>{_TOML_DOTTED})\s*=\s*(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*')")
_TOML_LINE = re.compile(rf"\s*(?P<key>{_TOML_DOTTED})\s*=\s*")


def _toml_keys(dotted: str) -> tuple[str, ...]:
    return tuple(_unquote(part.strip()) for part in re.findall(rf"{_TOML_KEY}", dotted))


def _toml(text: str) -> Iterator[Value]:
    table: tuple[str, ...] = ()
    multiline: str | None = None  # the closing quotes of a multi-line string being skipped
    for number, line in enumerate(text.splitlines(), 1):
        if multiline is not None:
            if multiline in line:
                multiline = None
            continue
        header = _TOML_HEADER.match(line)
        if header is not None:
            table = _toml_keys(header.group("key"))
            continue
        start = _TOML_LINE.match(line)
        if start is None:
            continue
        rest = line[start.end():]
        for quotes in ('"""', "'''"):
            if rest.startswith(quotes) and rest.count(quotes) == 1:
                multiline = quotes
        if multiline is not None:
            continue
        outer = _toml_keys(start.group("key"))
        if rest.startswith("{"):  # an inline table: its pairs are under the line's key
            for pair in _TOML_PAIR.finditer(line, start.end()):
                yield Value((*table, *outer, *_toml_keys(pair.group("key"))), _toml_string(pair.group("value")),
                            number, pair.start("value"), pair.end("value"))
            continue
        pair = _TOML_PAIR.match(line, start.start("key"))
        if pair is not None:
            yield Value((*table, *outer), _toml_string(pair.group("value")), number, pair.start("value"),
                        pair.end("value"))


def _toml_string(token: str) -> str:
    return _json_string(token) if token.startswith("\"") else token[1:-1]
