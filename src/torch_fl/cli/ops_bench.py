"""`torchfl ops-bench`: the native ops of a model (or of PyTorch's OpInfo samples) timed on a device against
their route alternatives and the reference device; the verdicts (measured / slow per op and dtype) written
into a user description overlay that coverage and grade read.

Exit status: 0 measured (slow ops are a result: in the report, the JSON and the overlay), 1 the device cannot
run the model (an unsupported operator), 2 on a usage error or bad input.
"""

from __future__ import annotations

import argparse

from .args import add_report_files, add_train, command_parser, positive_int
from .exits import UsageError


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, model="optional",
                            device={"required": True, "what": "device to measure"})
    add_train(parser, what="record the ops of a training step", without="of a forward")
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

    from ..analysis.ops_bench import opinfo_ops_bench, ops_bench, preferred_translations, write_overlay
    from .output import check_folder, emit, emit_model_run

    if args.prefer and not args.overlay:
        raise UsageError("--prefer writes the preferred routes into the overlay: give --overlay FILE too")
    if args.overlay:
        check_folder(Path(args.overlay).expanduser(), "--overlay", f"the overlay {args.overlay}")

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
        emit(finish(opinfo_ops_bench(args.device, ops=args.op, rounds=args.rounds)), json_path=args.json,
             html_path=args.html)
        return 0

    def measure(spec):
        return finish(ops_bench(spec, args.device, train=args.train, rounds=args.rounds, ops=args.op))

    return emit_model_run("torchfl ops-bench", args, measure,
                          failure=lambda spec, error: {"device": args.device, "model": spec.name, "error": error})
