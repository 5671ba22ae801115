"""TOML reading (tomllib / tomli) and a small writer for the value shapes torch-fl produces."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError
loads = tomllib.loads

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_BOMS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16",
         b"\xfe\xff": "UTF-16"}


class TextDecodeError(ValueError):
    """A file that is not UTF-8 text (binary, UTF-16, Latin-1); the message says which and the fix."""


# Descriptions, configs and route logs are kilobytes; the largest generated op table is ~200 KB.
MAX_BYTES = 64 * 1024 * 1024
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def file_kind(mode: int) -> str:
    """'a FIFO (named pipe)', 'a folder', ... for what is not a regular file ('' for a regular file)."""
    return next((what for test, what in _KINDS if test(mode)), "" if stat.S_ISREG(mode) else "not a file")


def read_bytes(path: str | Path, limit: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them. Anything else is an OSError that
    says what it is: a FIFO or a device is not opened for reading at all (reading /dev/zero never ends,
    and a FIFO blocks until a writer comes), a folder is named as one (not 'does not exist')."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO's open does not block
    except IsADirectoryError:
        raise OSError(errno.EISDIR, "it is a folder, not a file", str(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"it is {file_kind(st.st_mode)}, not a regular file; torch-fl reads "
                          "regular files only. Fix: name the file itself", str(path))
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"it is {st.st_size / 1e6:.0f} MB, more than the {limit / 1e6:.0f} MB a "
                          "torch-fl input file may be; is it the right file?", str(path))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(min(limit, st.st_size) + 1)  # read(n) allocates n: never the limit itself
            while len(data) <= limit and (more := handle.read(min(1 << 20, limit + 1 - len(data)))):
                data += more  # the file grew after fstat
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while being read
        raise OSError(errno.EFBIG, f"it is more than the {limit / 1e6:.0f} MB a torch-fl input file may be",
                      str(path))
    return data


def read_text(path: str | Path) -> str:
    """The UTF-8 text of a TOML file (a UTF-8 byte-order mark is dropped). OSError when it cannot be read
    (also when it is a FIFO, a device or too large: see `read_bytes`), TextDecodeError (no path in the
    message: callers add it) when it is not UTF-8 text."""
    data = read_bytes(path)
    for bom, encoding in _BOMS.items():
        if data.startswith(bom):
            raise TextDecodeError(f"the file is {encoding}-encoded; TOML files must be UTF-8. Fix: save it "
                                  f"as UTF-8 (e.g. iconv -f {encoding} -t UTF-8)")
    if b"\x00" in data[:8192]:
        raise TextDecodeError("the file is binary (it contains NUL bytes), not a TOML text file. Fix: point "
                              "at the .toml file itself")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise TextDecodeError(f"line {line}: byte 0x{data[exc.start]:02x} is not UTF-8; TOML files must be "
                              "UTF-8 text. Fix: save the file as UTF-8") from None


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes are a subset of TOML basic-string escapes.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        if len(value) > 4 or sum(len(_value(v)) for v in value) > 80:
            return "[\n" + "".join(f"    {_value(v)},\n" for v in value) + "]"
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def dumps(data: dict[str, Any], comments: dict[str, str] | None = None) -> str:
    """Write `data` as TOML: scalars first, then one [table] per nested dict (dicts of scalars or of
    inline-able values). `comments` maps 'section.key' (or 'key') to a trailing comment."""
    comments = comments or {}
    lines: list[str] = []

    def emit(prefix: str, table: dict[str, Any]) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in table.items() if isinstance(v, dict)}
        for k, v in scalars.items():
            note = comments.get(f"{prefix}{k}")
            lines.append(f"{_key(k)} = {_value(v)}" + (f"  # {note}" if note else ""))
        for k, v in tables.items():
            lines.append("")
            lines.append(f"[{prefix}{_key(k)}]")
            emit(f"{prefix}{_key(k)}.", v)

    emit("", data)
    return "\n".join(lines).lstrip("\n") + "\n"
