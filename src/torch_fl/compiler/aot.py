"""AOT: torch.export + AOTInductor packages that carry the fingerprint of the stack that built them,
the sha256 of every file in the package and the identity of what was exported.

``export_aot`` writes ``model.pt2`` (an AOTInductor package, its intermediate files in the compile
cache entry) with ``extra/torch_fl_fingerprint.json`` added to the archive: fingerprint components,
``artifacts`` (archive member -> sha256) and ``identity`` (model class, sha256 of the exported graph,
input specs, the names/shapes/dtypes of its state). ``load_aot`` reads the package once, checks every
member against its hash (a patched ``.so`` is refused), the identity when the caller gives the module or
an expected identity (a package swapped for another model's is refused), and the fingerprint (a ``.so``
built against another libtorch would crash the process or run wrong); then it loads the bytes it checked
from a private copy, so the file cannot change between the check and the load.

The record travels inside the package, so it detects corruption and accidents, not an attacker who can
rewrite the package (and its record): against that, pin the package's own sha256 (``sha256=``,
``torchfl aot --check FILE --sha256 HEX``) from a channel you trust. See docs/compile.md, "Trust".
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import AOTFingerprintError, AOTIntegrityError, TorchFLError, TorchVersionError
from . import cache, isa, jit, torchkey
from .fingerprint import COMPONENTS, describe_change, fingerprint
from .target import description_of

_log = logging.getLogger("torch_fl.compile")

FINGERPRINT_FILE = "torch_fl_fingerprint.json"
FORMAT = 2  # 2: artifact hashes and identity
IDENTITY_KEYS = ("model", "graph", "inputs", "state", "weights")


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
    jit.private_headers(entry)
    torchkey.install(entry.path)
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
        cache.seal(entry)
        with zipfile.ZipFile(tmp) as archive:
            artifacts = _member_hashes(archive)
        metadata = {
            "format": FORMAT, "fingerprint": entry.fingerprint.digest,
            "description": entry.fingerprint.description, "components": entry.fingerprint.components,
            "created": cache.timestamp(), "model": label or type(model).__name__,
            "inputs": [_input_text(x) for x in inputs], "dynamic_shapes": section["dynamic_shapes"],
            "identity": program_identity(model, program), "artifacts": artifacts,
        }
        with zipfile.ZipFile(tmp, "a") as archive:
            archive.writestr(f"{_archive_root(archive)}extra/{FINGERPRINT_FILE}", json.dumps(metadata, indent=2))
        os.replace(tmp, out)  # a reader never sees a package without its fingerprint
    finally:
        tmp.unlink(missing_ok=True)
    seconds = time.perf_counter() - start
    metadata["sha256"] = _sha256_file(out)  # of the whole package: pin it where packages are shared
    _log.info("aot: wrote %s in %.1f s (fingerprint %s, sha256 %s)", out, seconds,
              entry.fingerprint.entry_name, metadata["sha256"])
    return AOTResult(out, seconds, out.stat().st_size, metadata)


# Identity and integrity ---------------------------------------------------------------------------
def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _member_hashes(archive: zipfile.ZipFile) -> dict[str, str]:
    """Archive member (without the archive's top folder) -> sha256, for every member but the record.
    A member zip cannot read (bytes patched in place break its CRC) gets 'unreadable: why'."""
    root = _archive_root(archive)
    hashes = {}
    for info in archive.infolist():
        if info.is_dir() or info.filename.endswith(f"extra/{FINGERPRINT_FILE}"):
            continue
        try:
            hashes[info.filename.removeprefix(root)] = hashlib.sha256(archive.read(info)).hexdigest()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            hashes[info.filename.removeprefix(root)] = f"unreadable: {exc}"
    return hashes


def model_identity(model: torch.nn.Module) -> dict[str, str]:
    """What can be told about a module without exporting it: its class, the names, shapes and dtypes
    of its state (parameters and persistent buffers), and the sha256 of the state's values (two
    checkpoints of one architecture differ only there; hashing costs about a second per GB)."""
    cls = type(model)
    items = sorted(model.state_dict().items())
    state = [f"{name}:{tuple(t.shape)}:{str(t.dtype).removeprefix('torch.')}" for name, t in items]
    weights = hashlib.sha256()
    for name, t in items:
        weights.update(name.encode())
        raw = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).clone()
        weights.update(bytes(raw.untyped_storage()))
    return {"model": f"{cls.__module__}.{cls.__qualname__}",
            "state": hashlib.sha256("\n".join(state).encode()).hexdigest(), "weights": weights.hexdigest()}


def program_identity(model: torch.nn.Module, program: Any) -> dict[str, str]:
    """model_identity plus the sha256 of the exported graph (its printed form: ops, shapes, order) and
    the input specs (pytree structure, shapes, dtypes)."""
    specs = [str(program.call_spec.in_spec)] + [
        f"{spec.arg}" for spec in program.graph_signature.input_specs if spec.kind.name == "USER_INPUT"]
    shapes = [str(node.meta.get("val")) for node in program.graph.nodes if node.op == "placeholder"]
    return {**model_identity(model),
            "graph": hashlib.sha256(str(program.graph).encode()).hexdigest(),
            "inputs": hashlib.sha256("\n".join(specs + shapes).encode()).hexdigest()}


def identity_problems(recorded: Any, expected: dict[str, str]) -> list[str]:
    """Each identity key of `expected` that the package's recorded identity does not match."""
    if not isinstance(recorded, dict):
        return ["the package records no identity (built by an older torch-fl): rebuild it"]
    unknown = set(expected) - set(IDENTITY_KEYS)
    if unknown:
        raise ValueError(f"expect: unknown identity keys {sorted(unknown)}; known: {', '.join(IDENTITY_KEYS)}")
    return [f"{key}: the package holds {_short(recorded.get(key))}, expected {_short(value)}"
            for key, value in expected.items()
            if recorded.get(key) != value and not (key == "model" and same_file_class(recorded.get(key), value))]


def same_file_class(recorded: Any, expected: str) -> bool:
    """A package built from a file entry point (`torchfl aot gpt.py:GPT`) records the class under the
    name the file was imported as (`_torch_fl_model_gpt.GPT`); the caller's class is the same one when
    it has the same qualified name in a module of that file's stem (`gpt`, `examples.gpt`) or in the
    script run as __main__. The state and weights hashes still decide whether it holds that model."""
    from ..analysis.model import FILE_MODULE_PREFIX

    module, _, qualname = str(recorded).partition(".")  # the file's module name has no dot
    if not module.startswith(FILE_MODULE_PREFIX) or not qualname or not expected.endswith(f".{qualname}"):
        return False
    their_module = expected[: -len(qualname) - 1]
    return their_module.rpartition(".")[2] in (module.removeprefix(FILE_MODULE_PREFIX), "__main__")


def _short(value: Any) -> str:
    text = str(value)
    return text[:16] + "..." if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


def member_problems(archive: zipfile.ZipFile, record: dict[str, Any]) -> list[str]:
    """Members that differ from, are missing from, or are not in the record's artifact hashes."""
    recorded = record.get("artifacts")
    if not isinstance(recorded, dict) or not recorded:
        return ["the package records no artifact hashes (built by an older torch-fl, format "
                f"{record.get('format', '?')}): rebuild it with `torchfl aot`"]
    actual = _member_hashes(archive)
    problems = [f"{name}: sha256 {_short(recorded[name])} recorded, "
                f"{digest if digest.startswith('unreadable') else _short(digest) + ' now'} (altered)"
                for name, digest in sorted(actual.items()) if name in recorded and recorded[name] != digest]
    problems += [f"{name}: not in the record (added after the package was built)"
                 for name in sorted(set(actual) - set(recorded))]
    problems += [f"{name}: recorded but missing" for name in sorted(set(recorded) - set(actual))]
    return problems


def verify_package(path: str | os.PathLike, data: bytes | None = None, *, sha256: str | None = None,
                   model: torch.nn.Module | None = None,
                   expect: dict[str, str] | None = None) -> dict[str, Any]:
    """Check an AOT package's bytes: the whole file's sha256 when given, every member against the
    recorded hashes, and the identity against `model` (class and state) and/or `expect`. Returns the
    record; raises AOTIntegrityError listing every problem."""
    path = Path(path)
    if data is None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise AOTFingerprintError(f"{path} is not a readable AOT package: {exc}") from None
    problems = []
    if sha256 is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256.lower():
            problems.append(f"the package's sha256 is {actual}, expected {sha256}")
    record = _read_record(path, data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        problems += member_problems(archive, record)
    wanted = {**(model_identity(model) if model is not None else {}), **(expect or {})}
    if wanted:
        problems += identity_problems(record.get("identity"), wanted)
    if problems:
        raise AOTIntegrityError(
            f"{path} is refused: " + "; ".join(problems) + ". Do not load it: rebuild it with `torchfl aot "
            f"MODEL --out {path.name}`, or fetch the package again from where it was built.", problems)
    return record


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
    """The torch-fl metadata of an AOT package (fingerprint components, model, inputs, identity,
    artifact hashes), read without loading the package. Raises AOTFingerprintError when it has none."""
    from .. import _toml

    path = Path(path)
    try:
        # a regular file only (reading /dev/zero or a FIFO never ends); packages are up to a few GB
        data = _toml.read_bytes(path, limit=1 << 40)
    except OSError as exc:
        raise AOTFingerprintError(f"{path} is not a readable AOT package (.pt2 zip archive): "
                                  f"{exc.strerror or exc}") from None
    return _read_record(path, data)


def _read_record(path: Path, data: bytes) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [n for n in archive.namelist() if n.endswith(f"extra/{FINGERPRINT_FILE}")]
            if not names:
                raise AOTFingerprintError(
                    f"{path} has no torch-fl fingerprint (it was not built by `torchfl aot` / "
                    f"torch.fl.export_aot), so nothing says which stack it was built for. Rebuild it with "
                    f"`torchfl aot MODEL --out {path.name}`, or load it unchecked with "
                    f"torch._inductor.aoti_load_package.")
            if len(names) > 1:
                raise AOTFingerprintError(f"{path} holds {len(names)} torch-fl records ({', '.join(names)}); "
                                          f"a package built by torch-fl has one")
            record = json.loads(archive.read(names[0]))
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise AOTFingerprintError(f"{path} is not a readable AOT package (.pt2 zip archive): {exc}") from None
    if not isinstance(record, dict) or not isinstance(record.get("components"), dict):
        raise AOTFingerprintError(f"{path}: its torch-fl fingerprint record is malformed")
    return record


def check_package(path: str | os.PathLike, *, device: str | torch.device | None = None,
                  ignore: Iterable[str] = (), record: dict[str, Any] | None = None) -> dict[str, tuple[str, str]]:
    """What differs between the package's stack and this process's: fingerprint components, and
    ``cpu_isa`` for a CPU package whose vector ISA this CPU lacks. name -> (package, here). `record`:
    the package's record when already read (verify_package)."""
    data = record if record is not None else read_package_fingerprint(path)
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
             ignore: Iterable[str] = (), device_index: int = -1, model: torch.nn.Module | None = None,
             expect: dict[str, str] | None = None, sha256: str | None = None) -> Any:
    """Load an AOT package after checking its integrity, that it is the expected model, and that it was
    built for this stack.

    Args:
        path: a .pt2 file written by ``torchfl aot`` / ``torch.fl.export_aot``.
        device: whose description the package must match (default: the active one).
        ignore: fingerprint components not to compare (e.g. ``["cxx"]`` when you know a compiler
            upgrade is harmless for a prebuilt package), or ``"cpu_isa"``.
        device_index: passed to ``torch._inductor.aoti_load_package``.
        model: the module the package is expected to hold: its class, the names, shapes and dtypes of
            its state, and the values of its weights must match the package's recorded identity.
        expect: an expected identity (keys of ``IDENTITY_KEYS``: ``model``, ``graph``, ``inputs``,
            ``state``, ``weights``), e.g. the ``identity`` that export_aot / ``torchfl aot`` reported.
        sha256: the expected sha256 of the whole package file, from a channel you trust (the record
            inside the package cannot protect against someone who rewrites the package).

    Raises AOTIntegrityError when a file in the package differs from its recorded hash (a patched
    ``.so``), when the package records no hashes, or when it is not the expected model; and
    AOTFingerprintError naming each component that differs (package value -> this process), and
    ``cpu_isa`` when a CPU package needs a vector ISA this CPU lacks (AVX-512 code on an AVX2 host).

    Example::

        model = torch.fl.load_aot("model.pt2", model=GPT())
        logits = model(tokens)
    """
    path = Path(path)
    try:
        data = path.read_bytes()  # read once: what is checked is what is loaded
    except OSError as exc:
        raise AOTFingerprintError(f"{path} is not a readable AOT package (.pt2 zip archive): {exc}") from None
    record = verify_package(path, data, sha256=sha256, model=model, expect=expect)
    desc = description_of(device)
    private = Path(tempfile.mkdtemp(prefix="torch_fl_aot-"))  # 0700: nobody else can swap the copy
    try:
        copy = private / path.name
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        differences = check_package(copy, device=device, ignore=tuple(ignore), record=record)
        if differences:
            names = ", ".join(differences)
            raise AOTFingerprintError(
                f"{path} was built for another stack; what differs (package -> this process): "
                f"{describe_change(differences)}. Rebuild it here with `torchfl aot MODEL --out "
                f"{path.name}`, or, if you know the difference is harmless, pass ignore=[...] naming "
                f"them ({names}).", differences)
        _require_aoti()
        # Loading probes the CPU's vector ISA like a compile does: answer it from this stack's entry.
        isa.install(cache.open_entry(desc).path)
        return torch._inductor.aoti_load_package(str(copy), device_index=device_index)
    finally:
        shutil.rmtree(private, ignore_errors=True)
