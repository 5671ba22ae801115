"""`torchfl ops-bench`: the native ops of a model (or of PyTorch's OpInfo samples) timed on a device against
their route alternatives and the reference device; the verdicts (measured / slow per op and dtype) written
into a user description overlay that coverage and grade read.

Exit status: 0 measured (slow ops are a result: in the report, the JSON and the overlay), 1 the device cannot
run the model (an unsupported operator), 2 on a usage error or bad input.
"""

from __future__ import annotations

import argparse
import sys

from .args import add_report_files, command_parser, positive_int
from .exits import CommandError, UsageError

DESCRIPTION = ("Time every op a step of MODEL runs natively on a device (the kernel the device has) against "
               "the alternatives torch-fl could route it to: its translation (decomposition), a registered "
               "kernel, and the reference device (the CPU, on a real chip), in interleaved rounds with one "
               "intra-op thread; an alternative 1.25x faster in three rounds of four makes the op 'slow'. "
               "Without MODEL, the ops of PyTorch's OpInfo samples (float32; narrow them with --op). --overlay FILE writes the verdicts "
               "as [ops.measured] / [ops.slow] of a description that extends the chip's; put FILE's folder in "
               "FL_DESCRIPTION_PATH and coverage and grade show those ops as 'native but slow'; with --prefer the "
               "overlay also routes the ops whose translation is faster to it.")
EPILOG = ("Examples:\n  torchfl ops-bench examples/gpt.py:factory --device acc0 --overlay ~/.config/fl/npu.toml\n"
          "  torchfl ops-bench --device cuda --op aten::gelu --op aten::layer_norm --json -\n"
          "  FL_DESCRIPTION_PATH=~/.config/fl torchfl coverage examples/gpt.py:factory --device npu\n"
          "Exit status: 0 measured, 1 the device cannot run the model (unsupported operator), 2 usage error.")


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, DESCRIPTION, EPILOG, model="optional",
                            device={"required": True, "what": "device to measure"})
    parser.add_argument("--train", action=argparse.BooleanOptionalAction, default=True,
                        help="record the ops of a training step (forward, backward, AdamW update; default) or, "
                             "with --no-train, of a forward")
    parser.add_argument("--op", action="append", metavar="OP", default=None,
                        help="measure only this op (aten::name or aten::name.overload; repeatable)")
    parser.add_argument("--rounds", type=positive_int, default=15, metavar="N",
                        help="timed rounds per op, each timing every alternative once (default 15)")
    parser.add_argument("--overlay", metavar="FILE",
                        help="write the verdicts into this user description overlay (created, or updated: the "
                             "pairs measured now replace their earlier verdicts)")
    parser.add_argument("--prefer", action="store_true",
                        help="with --overlay: also route the ops whose translation is faster in every measured "
                             "dtype to it (ops.translate of the overlay); opt-in, as the overlay itself is")
    add_report_files(parser)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..analysis.model import load_model
    from ..analysis.ops_bench import opinfo_ops_bench, ops_bench, preferred_translations, write_overlay
    from ..errors import UnsupportedOperatorError
    from ..report import end_progress, progress
    from .output import emit, emit_json

    if args.prefer and not args.overlay:
        raise UsageError("--prefer writes the preferred routes into the overlay: give --overlay FILE too")
    if args.overlay:
        folder = Path(args.overlay).expanduser().resolve().parent
        if not folder.is_dir():
            raise CommandError(f"cannot write the overlay {args.overlay}: the folder {folder} does not exist; "
                               f"create it or pass --overlay with a path in an existing folder")

    def finish(report):
        if args.overlay:
            path = str(Path(args.overlay).expanduser())
            prefer = preferred_translations(report.data["timings"]) if args.prefer else []
            write_overlay(path, report.data["description"], report.data["verdicts"], prefer=prefer)
            report.data["overlay"], report.data["preferred"] = path, prefer
            if prefer:
                report.summary.append(("preferred", f"routed to their translation in the overlay (ops.translate): "
                                                    f"{', '.join(prefer)}"))
            report.summary.append(("overlay", f"{path} (extends '{report.data['description']}')"))
        return report

    if args.model is None:
        report = opinfo_ops_bench(args.device, ops=args.op, rounds=args.rounds)
    else:
        progress(f"loading {args.model}")
        spec = load_model(args.model)
        try:
            report = ops_bench(spec, args.device, train=args.train, rounds=args.rounds, ops=args.op)
        except UnsupportedOperatorError as exc:  # (the step stops at the first op the device cannot run)
            end_progress()
            print(f"torchfl ops-bench: {args.device} cannot run {spec.name} with routing active:\n{exc}",
                  file=sys.stderr)
            if args.json:
                emit_json({"device": args.device, "model": spec.name, "error": str(exc)}, args.json)
            return 1
    emit(finish(report), json_path=args.json, html_path=args.html)
    return 0
