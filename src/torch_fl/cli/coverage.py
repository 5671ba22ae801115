"""`torchfl coverage`: which of a model's operators a device runs natively, and how the rest are routed.

Exit status: 0 when the analysis ran, whatever it found (coverage is a report, and a model with a
translated op still runs); with ``--strict``, 1 when some call is unsupported on the device, whether the model makes it or a
translation does (the model would stop with UnsupportedOperatorError there); 2 when the model could not be traced (no
verdict: a CI gate must not read it as "will not run"). An entry point or device name that is wrong exits 2
(bad input), as in every command (docs/cli.md).
"""

from __future__ import annotations

import argparse
import sys

from .args import add_report_files, command_parser

OK, UNSUPPORTED, NOT_TRACED = 0, 1, 2


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, model="required",
                            device={"required": True, "what": "the chip whose routes classify the trace",
                                    "descriptions": True})
    parser.add_argument("--train", action="store_true",
                        help="trace a training step (forward, loss, backward, AdamW step), not inference")
    parser.add_argument("--amp", action="store_true",
                        help="run the forward pass under autocast with the device's autocast dtype")
    parser.add_argument("--plugin-version", metavar="VERSION",
                        help="for a chip with a vendor op table (npu, mlu, musa, xpu): answer for that "
                             "plugin release line (e.g. 2.5), and list the traced ops that change between "
                             "lines ('native from 2.7'); default: the installed plugin's, else the newest")
    add_report_files(parser)
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when some op is unsupported on the device (for CI)")


def run(args: argparse.Namespace) -> int:
    from ..analysis.coverage import coverage
    from ..analysis.model import load_model
    from ..analysis.trace import TraceError
    from ..report import end_progress, progress
    from .output import emit

    progress(f"loading {args.model}")
    spec = load_model(args.model)
    try:
        report = coverage(spec, args.device, train=args.train, amp=args.amp, plugin_version=args.plugin_version)
    except TraceError as exc:
        end_progress()
        print(f"torchfl coverage: could not trace {args.model} on {args.device}: {exc}", file=sys.stderr)
        return NOT_TRACED
    emit(report, json_path=args.json, html_path=args.html)
    return UNSUPPORTED if args.strict and report.data["summary"]["unsupported_calls"] else OK
