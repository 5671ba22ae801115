#!/usr/bin/env python
"""Generate the native-op tables of the backends a CPU build of torch cannot probe (CUDA, MPS), and
of the emulated test chip `minimal` (the core ATen opset; see MINIMAL_PLUMBING).

A CPU wheel registers no CUDA or MPS kernels, so the dispatcher cannot say what those backends
run. The installed wheel does ship the codegen input, ``native_functions.yaml``, which lists each
overload's kernels by dispatch key; this script applies torchgen's rules to it.

An overload is native for backend B when any of these hold:
  * its ``dispatch:`` block has a key list naming B (``CPU, CUDA: add_out``);
  * that block names a backend-independent composite key (``CompositeImplicitAutograd``,
    ``CompositeExplicitAutograd``, ``CompositeExplicitAutogradNonFunctional``);
  * it has no ``dispatch:`` block and is neither structured nor delegating (torchgen gives it an
    implicit ``CompositeImplicitAutograd`` kernel); ``dispatch: {}`` means no kernel at all;
  * it has a ``ufunc_inner_loop`` and B is CPU or CUDA (torchgen adds those kernels itself);
  * it has ``structured_delegate: X`` and X is native for B;
  * it is listed in the ``autogen:`` of an overload that is native for B (the generated kernel
    only forwards to that overload).
Sparse*, Quantized* and NestedTensor* keys are other layouts, not B. Overloads the installed torch
does not register (autogen names torchgen skipped) are left out.

Applied with B = CPU these rules give exactly what the CPU dispatcher reports, except for the
autogen'd overloads of ops without a CPU kernel (the dispatcher counts their generated
CompositeExplicitAutograd forwarder, which then fails) and a few C++-registered ops the YAML lacks.

The YAML is read with a small line parser of the file's fixed layout, so the script needs nothing
beyond the torch install it describes.

Usage: gen_op_tables.py [--check] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

YAML_RELPATH = "torchgen/packaged/ATen/native/native_functions.yaml"
DEFAULT_OUT_DIR = Path(__file__).resolve().parent.parent / "src/torch_fl/description/builtin/tables"
BACKENDS = {"cuda": "CUDA", "mps": "MPS"}  # table file stem -> dispatch key

COMPOSITE_KEYS = frozenset({
    "CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional",
})
UFUNC_KEYS = frozenset({"CPU", "CUDA"})  # torchgen/model.py UFUNC_DISPATCH_KEYS
IMPLICIT_KEYS = frozenset({"CompositeImplicitAutograd"})


# Parsing ------------------------------------------------------------------------------------------
@dataclass
class Entry:
    """The fields of one ``- func:`` item that decide where it has kernels."""

    name: str  # torchgen spelling: 'add.Tensor', 'gelu' (no overload)
    line: int
    dispatch: set[str] | None = None  # None: no dispatch: block at all
    structured: bool = False
    structured_delegate: str | None = None
    ufunc: bool = False
    autogen: list[str] = field(default_factory=list)

    def kernel_keys(self) -> frozenset[str]:
        """Dispatch keys this overload registers a kernel for itself (delegation aside)."""
        if self.dispatch is None and not self.structured and self.structured_delegate is None:
            return IMPLICIT_KEYS
        keys = frozenset(self.dispatch or ())
        return keys | UFUNC_KEYS if self.ufunc else keys


class ParseError(ValueError):
    def __init__(self, path: Path, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}; the layout of native_functions.yaml changed, "
                         "so teach scripts/gen_op_tables.py the new form")


def parse_native_functions(path: Path) -> list[Entry]:
    entries: list[Entry] = []
    block: str | None = None  # the open two-space key whose value is an indented block
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()  # no signature or kernel name contains '#'
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            entries.append(_start_entry(path, lineno, line))
            block = None
        elif not entries:
            raise ParseError(path, lineno, "indented line before the first '- func:'")
        elif indent == 2 and not line.lstrip().startswith("- "):
            block = _read_field(path, lineno, line.strip(), entries[-1])
        elif indent >= 4 and block == "dispatch":
            _read_dispatch_line(path, lineno, line.strip(), entries[-1])
        # Anything else is inside a block that does not decide kernels (precomputed, ufunc loops).
    return entries


def _start_entry(path: Path, lineno: int, line: str) -> Entry:
    if not line.startswith("- func:"):
        raise ParseError(path, lineno, f"expected '- func: ...' at column 0, got {line!r}")
    signature = line[len("- func:"):].strip()
    name, paren, _ = signature.partition("(")
    if not paren or not name:
        raise ParseError(path, lineno, f"cannot read the op name of {signature!r}")
    return Entry(name=name.strip(), line=lineno)


def _read_field(path: Path, lineno: int, text: str, entry: Entry) -> str | None:
    """Store one ``key: value`` line; return the key when its value is an indented block."""
    key, sep, value = text.partition(":")
    if not sep:
        raise ParseError(path, lineno, f"expected 'key: value', got {text!r}")
    key, value = key.strip(), value.strip()
    if key == "dispatch":
        if value not in ("", "{}"):
            raise ParseError(path, lineno, f"unexpected inline dispatch value {value!r}")
        entry.dispatch = set()
    elif key == "structured":
        entry.structured = value == "True"
    elif key == "structured_delegate":
        entry.structured_delegate = value
    elif key == "ufunc_inner_loop":
        entry.ufunc = True
    elif key == "autogen":
        entry.autogen = [op.strip() for op in value.split(",") if op.strip()]
    return key if value == "" else None


def _read_dispatch_line(path: Path, lineno: int, text: str, entry: Entry) -> None:
    keys, sep, kernel = text.partition(":")
    if not sep or not kernel.strip():
        raise ParseError(path, lineno, f"expected 'Key[, Key]: kernel' in a dispatch block, got {text!r}")
    assert entry.dispatch is not None  # set when the dispatch: line opened this block
    entry.dispatch.update(key.strip() for key in keys.split(","))


# Resolution ---------------------------------------------------------------------------------------
def native_ops(entries: list[Entry], dispatch_key: str, registered: frozenset[str]) -> set[str]:
    """The canonical overloads native for ``dispatch_key``, limited to those ``registered``.

    The limit matters for ``autogen:`` names: torchgen silently skips generating them for
    non-core CompositeImplicitAutograd groups (e.g. ``prelu.out``), and redoing its grouping
    here would be fragile, so the installed dispatcher says which ones exist."""
    by_name = {entry.name: entry for entry in entries}
    accepted = COMPOSITE_KEYS | {dispatch_key}
    native = {entry.name for entry in entries if _is_native(entry, by_name, accepted)}
    native.update(op for entry in entries if entry.name in native for op in entry.autogen)
    return {canonical(op) for op in native} & registered


def _is_native(entry: Entry, by_name: dict[str, Entry], accepted: frozenset[str]) -> bool:
    seen: set[str] = set()
    while True:
        if entry.kernel_keys() & accepted:
            return True
        delegate = entry.structured_delegate
        if delegate is None or delegate in seen:
            return False
        if delegate not in by_name:
            raise KeyError(f"{entry.name} delegates to {delegate}, which native_functions.yaml lacks")
        seen.add(delegate)
        entry = by_name[delegate]


def canonical(name: str) -> str:
    base, _, overload = name.partition(".")
    return f"aten::{base}.{overload or 'default'}"


# Output -------------------------------------------------------------------------------------------
def render_table(ops: Iterable[str], *, backend: str, torch_version: str) -> str:
    lines = sorted(set(ops))
    header = {
        "generated-by": "scripts/gen_op_tables.py",
        "torch-version": torch_version,
        "source": YAML_RELPATH,
        "backend": backend,
        "ops": str(len(lines)),
    }
    return "".join(f"# {key}: {value}\n" for key, value in header.items()) + "".join(
        op + "\n" for op in lines)


def find_yaml() -> Path:
    spec = importlib.util.find_spec("torchgen")
    if spec is None or spec.origin is None:
        sys.exit("torchgen is not importable: run this with the python of an installed torch wheel")
    path = Path(spec.origin).parent.parent / YAML_RELPATH
    if not path.is_file():
        sys.exit(f"{path} is missing: this torch install does not ship native_functions.yaml")
    return path


def registered_aten_ops() -> frozenset[str]:
    """Canonical names of every aten overload the installed torch registers (schemas exist for all
    backends even in a CPU build; only kernels are missing)."""
    import torch  # imported late so --help stays fast

    return frozenset(canonical(name.removeprefix("aten::"))
                     for name in torch._C._dispatch_get_all_op_names() if name.startswith("aten::"))


# The emulated test chip `minimal`: PyTorch's core ATen opset (the ops tagged `core`, what a
# backend must implement for torch.export graphs) plus the plumbing every eager backend needs for
# in-place copies, detaching and parameter wrapping, which the functional core set leaves out.
MINIMAL_PLUMBING = ("aten::copy_.default", "aten::detach.default", "aten::lift_fresh.default",
                    "aten::set_.source_Storage_storage_offset")


def minimal_ops(registered: frozenset[str]) -> set[str]:
    import torch

    core = set()
    for op in registered:
        name, _, overload = op.removeprefix("aten::").partition(".")
        packet = getattr(torch.ops.aten, name, None)
        ovl = getattr(packet, overload, None) if packet is not None else None
        if ovl is not None and torch.Tag.core in ovl.tags:
            core.add(op)
    return core | (set(MINIMAL_PLUMBING) & registered)


def generate() -> dict[str, str]:
    """Table file name -> contents, for every backend."""
    import torch

    entries = parse_native_functions(find_yaml())
    registered = registered_aten_ops()
    tables = {
        f"{stem}.txt": render_table(native_ops(entries, key, registered), backend=key,
                                    torch_version=torch.__version__)
        for stem, key in sorted(BACKENDS.items())
    }
    tables["minimal.txt"] = render_table(minimal_ops(registered), backend="core ATen opset + plumbing",
                                         torch_version=torch.__version__)
    return tables


def check(tables: dict[str, str], out_dir: Path) -> list[str]:
    """One line per table that differs from what was generated."""
    return [problem for name, text in tables.items() for problem in _diff(out_dir / name, text)]


def _diff(path: Path, expected: str) -> Iterator[str]:
    if not path.is_file():
        yield f"{path}: missing"
        return
    actual = path.read_text(encoding="utf-8")
    if actual == expected:
        return
    old, new = actual.splitlines(), expected.splitlines()
    old_header = [line for line in old if line.startswith("#")]
    new_header = [line for line in new if line.startswith("#")]
    if old_header != new_header:
        yield f"{path}: header {old_header} != generated {new_header}"
    removed = sorted(set(old) - set(new) - set(old_header))
    added = sorted(set(new) - set(old) - set(new_header))
    if removed or added:
        yield (f"{path}: {len(added)} ops to add (e.g. {added[:3]}), "
               f"{len(removed)} to remove (e.g. {removed[:3]})")
    elif old_header == new_header:
        yield f"{path}: same ops and header but different bytes (ordering or whitespace)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the tables in --out-dir differ from what would be generated")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR,
                        help=f"where the tables live (default {DEFAULT_OUT_DIR})")
    args = parser.parse_args(argv)
    tables = generate()
    if args.check:
        problems = check(tables, args.out_dir)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run scripts/gen_op_tables.py to regenerate", file=sys.stderr)
        return 1 if problems else 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in tables.items():
        # newline="\n" keeps the bytes identical on Windows, so --check agrees everywhere.
        (args.out_dir / name).write_text(text, encoding="utf-8", newline="\n")
        count = sum(1 for line in text.splitlines() if not line.startswith("#"))
        print(f"{args.out_dir / name}: {count} ops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
