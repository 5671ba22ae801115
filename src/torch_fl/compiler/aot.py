"""AOT: torch.export + AOTInductor packages that carry the fingerprint of the stack that built them.

``export_aot`` writes ``model.pt2`` (an AOTInductor package, its intermediate files in the compile
cache entry) with ``extra/torch_fl_fingerprint.json`` added to the archive. ``load_aot`` reads that
file first and refuses a package built for another stack, naming what differs, instead of letting a
``.so`` built against another libtorch crash the process or run wrong.
"""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import TorchFLError, TorchVersionError
from . import cache, isa, jit
from .fingerprint import COMPONENTS, describe_change, fingerprint
from .target import description_of

_log = logging.getLogger("torch_fl.compile")

FINGERPRINT_FILE = "torch_fl_fingerprint.json"
FORMAT = 1


class AOTFingerprintError(TorchFLError, RuntimeError):
    """An AOT package built for another stack (or without a torch-fl fingerprint)."""

    def __init__(self, message: str, differences: dict[str, tuple[str, str]] | None = None):
        super().__init__(message)
        self.differences = differences or {}  # component -> (package value, this process's value)


@dataclass
class AOTResult:
    path: Path
    seconds: float
    size: int
    metadata: dict[str, Any]


def _require_aoti() -> None:
    import torch._inductor

    if not (hasattr(torch._inductor, "aoti_compile_and_package") and hasattr(torch._inductor, "aoti_load_package")):
        raise TorchVersionError(f"AOT packages need torch >= 2.6 (torch._inductor.aoti_compile_and_package); "
                                f"this is torch {torch.__version__}. Use torch.fl.compile (JIT) instead.")


def export_aot(model: torch.nn.Module, example_inputs: Sequence[Any], out: str | os.PathLike, *,
               device: str | torch.device | None = None, label: str = "") -> AOTResult:
    """Export `model` on `example_inputs` and package it with AOTInductor into `out` (a .pt2 file).

    The description of `device` decides whether AOT is allowed (compile.aot) and the shapes: with
    ``dynamic_shapes = "dynamic"`` every input dimension is exported as dynamic (torch.export.Dim.AUTO
    lets export keep the ones the model specializes), otherwise the package accepts the example shapes
    only. `label` (e.g. the model entry point) is recorded in the package."""
    desc = description_of(device)
    section = desc.section("compile")
    if not section["aot"]:
        raise TorchFLError(f"the '{desc.name}' description sets compile.aot = false ({desc.path or 'built-in'}): "
                           f"this stack does not support AOTInductor packages. Use torch.fl.compile (JIT).")
    _require_aoti()
    out = Path(out)
    if out.suffix != ".pt2":
        raise TorchFLError(f"{out}: an AOT package file name must end in .pt2")
    entry = cache.open_entry(desc)
    jit.use_entry(entry)  # AOTInductor's intermediate files go to the entry too
    isa.install(entry.path)
    inputs = tuple(example_inputs)
    dynamic = section["dynamic_shapes"] == "dynamic"
    start = time.perf_counter()
    tmp = out.with_name(f".{out.stem}.tmp-{os.getpid()}.pt2")
    try:
        with warnings.catch_warnings():
            # torch's own pytree deprecation, raised inside export on 2.13: not the user's to act on.
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            program = torch.export.export(model, inputs,
                                          dynamic_shapes=_all_dynamic(inputs) if dynamic else None)
            torch._inductor.aoti_compile_and_package(program, package_path=str(tmp))
        metadata = {
            "format": FORMAT, "fingerprint": entry.fingerprint.digest,
            "description": entry.fingerprint.description, "components": entry.fingerprint.components,
            "created": cache.timestamp(), "model": label or type(model).__name__,
            "inputs": [_input_text(x) for x in inputs], "dynamic_shapes": section["dynamic_shapes"],
        }
        with zipfile.ZipFile(tmp, "a") as archive:
            archive.writestr(f"{_archive_root(archive)}extra/{FINGERPRINT_FILE}", json.dumps(metadata, indent=2))
        os.replace(tmp, out)  # a reader never sees a package without its fingerprint
    finally:
        tmp.unlink(missing_ok=True)
    seconds = time.perf_counter() - start
    _log.info("aot: wrote %s in %.1f s (fingerprint %s)", out, seconds, entry.fingerprint.entry_name)
    return AOTResult(out, seconds, out.stat().st_size, metadata)


def _all_dynamic(inputs: tuple) -> tuple:
    from torch.export import Dim

    return tuple({i: Dim.AUTO for i in range(x.dim())} if isinstance(x, torch.Tensor) else None
                 for x in inputs)


def _input_text(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{'x'.join(map(str, value.shape)) or 'scalar'} {str(value.dtype).removeprefix('torch.')}"
    return type(value).__name__


def _archive_root(archive: zipfile.ZipFile) -> str:
    """The top-level folder every record of a PT2 archive sits in ('model/')."""
    first = archive.namelist()[0]
    return first.split("/", 1)[0] + "/" if "/" in first else ""


def read_package_fingerprint(path: str | os.PathLike) -> dict[str, Any]:
    """The torch-fl metadata of an AOT package (fingerprint components, model, inputs), read without
    loading the package. Raises AOTFingerprintError when the package has none."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith(f"extra/{FINGERPRINT_FILE}")]
            if not names:
                raise AOTFingerprintError(
                    f"{path} has no torch-fl fingerprint (it was not built by `torchfl aot` / "
                    f"torch.fl.export_aot), so nothing says which stack it was built for. Rebuild it with "
                    f"`torchfl aot MODEL --out {path.name}`, or load it unchecked with "
                    f"torch._inductor.aoti_load_package.")
            data = json.loads(archive.read(names[0]))
    except (zipfile.BadZipFile, OSError) as exc:
        raise AOTFingerprintError(f"{path} is not a readable AOT package (.pt2 zip archive): {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("components"), dict):
        raise AOTFingerprintError(f"{path}: its torch-fl fingerprint record is malformed")
    return data


def check_package(path: str | os.PathLike, *, device: str | torch.device | None = None,
                  ignore: Iterable[str] = ()) -> dict[str, tuple[str, str]]:
    """What differs between the package's stack and this process's: fingerprint components, and
    ``cpu_isa`` for a CPU package whose vector ISA this CPU lacks. name -> (package, here)."""
    data = read_package_fingerprint(path)
    ignore = set(ignore)
    unknown = ignore - set(COMPONENTS) - {"cpu_isa"}
    if unknown:
        raise ValueError(f"ignore: {sorted(unknown)} are neither fingerprint components "
                         f"({', '.join(COMPONENTS)}) nor cpu_isa")
    desc = description_of(device)
    differences = fingerprint(desc).diff(data["components"])
    if not differences and "cpu_isa" not in ignore:
        differences = _cpu_isa_difference(path, cache.open_entry(desc).path)
    return {name: change for name, change in differences.items() if name not in ignore}


def _cpu_isa_difference(path: str | os.PathLike, entry: Path) -> dict[str, tuple[str, str]]:
    """A CPU package compiled for a vector ISA this CPU lacks would die of an illegal instruction (torch
    only warns): compare the ISA AOTInductor recorded with the ones Inductor finds usable here."""
    loader = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    if loader is None or not hasattr(loader, "load_metadata_from_package"):
        return {}
    try:
        meta = loader.load_metadata_from_package(str(path), "model")
    except RuntimeError:
        return {}
    built = str(meta.get("AOTI_CPU_ISA", "")).upper()
    if meta.get("AOTI_DEVICE_KEY") != "cpu" or built in ("", "INVALID_VEC_ISA"):
        return {}
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    isa.install(entry)  # the probe behind valid_vec_isa_list, answered from the entry when known
    usable = [str(i).upper() for i in valid_vec_isa_list()]
    return {} if built in usable else {"cpu_isa": (built, ", ".join(usable) or "no vector ISA")}


def load_aot(path: str | os.PathLike, *, device: str | torch.device | None = None,
             ignore: Iterable[str] = (), device_index: int = -1) -> Any:
    """Load an AOT package after checking that it was built for this stack.

    Args:
        path: a .pt2 file written by ``torchfl aot`` / ``torch.fl.export_aot``.
        device: whose description the package must match (default: the active one).
        ignore: fingerprint components not to compare (e.g. ``["cxx"]`` when you know a compiler
            upgrade is harmless for a prebuilt package), or ``"cpu_isa"``.
        device_index: passed to ``torch._inductor.aoti_load_package``.

    Raises AOTFingerprintError naming each component that differs (package value -> this process), and
    ``cpu_isa`` when a CPU package needs a vector ISA this CPU lacks (AVX-512 code on an AVX2 host).

    Example::

        model = torch.fl.load_aot("model.pt2")
        logits = model(tokens)
    """
    ignore = tuple(ignore)
    desc = description_of(device)
    differences = check_package(path, device=device, ignore=ignore)
    if differences:
        names = ", ".join(differences)
        raise AOTFingerprintError(
            f"{path} was built for another stack; what differs (package -> this process): "
            f"{describe_change(differences)}. Rebuild it here with `torchfl aot MODEL --out "
            f"{Path(path).name}`, or, if you know the difference is harmless, pass ignore=[...] naming "
            f"them ({names}).", differences)
    _require_aoti()
    # Loading probes the CPU's vector ISA like a compile does: answer it from this stack's entry.
    isa.install(cache.open_entry(desc).path)
    return torch._inductor.aoti_load_package(str(path), device_index=device_index)
