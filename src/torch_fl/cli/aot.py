"""`torchfl aot`: export a model and package it with AOTInductor, the fingerprint, artifact hashes and
identity embedded; or check a package (integrity, identity, stack) without loading it.
Exit status: 0 written / matches, 1 error, altered package or mismatch, 2 usage."""

from __future__ import annotations

import argparse

from ..report import Report, plural
from .args import add_device, add_json, command_parser
from .exits import UsageError


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, model="optional")
    parser.add_argument("--out", metavar="FILE", help="the package to write (must end in .pt2)")
    parser.add_argument("--check", metavar="FILE", help="check FILE's files against their recorded sha256 "
                                                        "and its fingerprint against this stack")
    parser.add_argument("--sha256", metavar="HEX", help="with --check: the sha256 the whole package must "
                                                       "have (from a channel you trust)")
    add_device(parser)
    add_json(parser, what="what was written (or, with --check, the check)")


def run(args: argparse.Namespace) -> int:
    from .output import emit

    if args.check:
        if args.model or args.out:
            raise UsageError("--check takes only a package (and --device, --sha256)")
        report = _check(args.check, args.device, args.sha256)
        emit(report, json_path=args.json)
        return 0 if report.data["ok"] else 1
    if args.sha256:
        raise UsageError("--sha256 goes with --check FILE")
    if not args.model or not args.out:
        raise UsageError("give MODEL and --out FILE (or --check FILE)")
    import torch

    from ..analysis.model import load_model
    from ..compiler.aot import export_aot
    from ..report import progress
    from ..routing.current import use_device

    progress(f"loading {args.model}")
    spec = load_model(args.model)
    dev = use_device(args.device)
    inputs = tuple(x.to(dev) if isinstance(x, torch.Tensor) else x for x in spec.inputs)
    progress(f"exporting {spec.name} on {dev} and compiling it with AOTInductor")
    result = export_aot(spec.model.to(dev).eval(), inputs, args.out, device=args.device, label=spec.name)
    meta = result.metadata
    lines = [f"wrote {result.path} ({result.size / 1e6:.1f} MB) in {result.seconds:.1f} s",
             f"inputs: {', '.join(meta['inputs'])} (dynamic_shapes {meta['dynamic_shapes']})",
             f"fingerprint {meta['fingerprint']} ({meta['description']}):", *_components(meta["components"]),
             f"sha256 {meta['sha256']} (pin it where the package is shared: torchfl aot --check FILE --sha256 HEX)",
             "identity (torch.fl.load_aot(FILE, expect={...}) refuses another model):",
             *_components(meta["identity"])]
    data = {"path": str(result.path), "size": result.size, "seconds": result.seconds, "metadata": meta}
    emit(Report("torchfl aot", data, text="\n".join(lines) + "\n"), json_path=args.json)
    return 0


def _check(path: str, device: str | None, sha256: str | None) -> Report:
    from ..compiler.aot import AOTIntegrityError, check_package, read_package_fingerprint, verify_package
    from ..compiler.fingerprint import describe_change

    meta = read_package_fingerprint(path)
    lines = [f"{path}: {meta.get('model', '?')}, built {meta.get('created', '?')}, fingerprint "
             f"{meta.get('fingerprint', '?')} ({meta.get('description', '?')})"]
    data: dict = {"path": path, "metadata": meta, "altered": [], "differences": {}, "ok": False}
    try:
        verify_package(path, sha256=sha256)
    except AOTIntegrityError as exc:
        data["altered"] = list(exc.problems)
        lines += [f"ALTERED: {problem}" for problem in exc.problems]
        lines.append("torch.fl.load_aot refuses this package: do not use it; rebuild it with `torchfl aot MODEL "
                     "--out FILE` or fetch it again from where it was built.")
        return Report("torchfl aot --check", data, text="\n".join(lines) + "\n")
    lines.append(f"integrity: every file of the package ({plural(len(meta['artifacts']), 'file')}) matches its "
                 f"recorded sha256" + (", and the package its pinned sha256" if sha256 else ""))
    differences = check_package(path, device=device, record=meta)
    if differences:
        data["differences"] = {name: list(pair) for name, pair in differences.items()}
        lines.append(f"MISMATCH: {describe_change(differences)}")
        lines.append("torch.fl.load_aot refuses this package here; rebuild it with `torchfl aot MODEL --out FILE`.")
    else:
        data["ok"] = True
        lines.append("matches this stack: torch.fl.load_aot will load it")
    return Report("torchfl aot --check", data, text="\n".join(lines) + "\n")


def _components(components: dict[str, str]) -> list[str]:
    width = max(map(len, components))
    return [f"  {name.ljust(width)}  {value}" for name, value in components.items()]
