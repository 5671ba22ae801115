"""`torchfl bench`: steps per second of a model with torch-fl routing on vs off on one device.

Exit status: 0 when both modes ran (the alignment ratio and the leak flag are results, in the report and
the JSON), 1 when the routed run cannot run the model (an unsupported operator), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys

from . import non_negative_int, positive_int
from .args import add_device, add_quiet, add_report_files


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name, help=help_text,
        description="Time MODEL's training (or inference) steps on a device with torch-fl routing active "
                    "and with routing disabled, in interleaved blocks; report the native alignment ratio "
                    "(routed steps/s / native steps/s, target >= 0.9), the time spent in translate and "
                    "fallback routes, peak memory, and whether memory grows from step to step.",
        epilog="For an emulated chip (emu:NAME), 'routing disabled' is the plain CPU run.\n"
               "Examples:\n  torchfl bench examples/gpt.py:factory --device emu:minimal --steps 10\n"
               "  torchfl bench examples/gpt.py:factory --device acc0 --no-train --json bench.json "
               "--html bench.html\n"
               "Exit status: 0 measured, 1 the routed run failed (unsupported operator), 2 usage error.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="model entry point, path/to/file.py:factory or "
                                                       "package.module:factory")
    add_device(parser, required=True)
    parser.add_argument("--steps", type=positive_int, default=20, metavar="N",
                        help="timed steps per mode (default 20)")
    parser.add_argument("--warmup", type=non_negative_int, default=3, metavar="W",
                        help="untimed steps per mode before timing (default 3)")
    parser.add_argument("--train", action=argparse.BooleanOptionalAction, default=True,
                        help="time training steps (forward, backward, AdamW update; default) or, with "
                             "--no-train, inference forwards")
    add_report_files(parser)
    add_quiet(parser)


def run(args: argparse.Namespace) -> int:
    from ..analysis.bench import bench
    from ..analysis.model import load_model
    from ..errors import UnsupportedOperatorError
    from ..report import end_progress, progress
    from .output import emit, emit_json

    progress(f"loading {args.model}")
    spec = load_model(args.model)
    try:
        report = bench(spec, args.device, steps=args.steps, warmup=args.warmup, train=args.train)
    except UnsupportedOperatorError as exc:
        end_progress()
        # The routed run stops at the first op the device cannot run: name it, no traceback.
        print(f"torchfl bench: {args.device} cannot run {spec.name} with routing active:\n{exc}",
              file=sys.stderr)
        if args.json:
            emit_json({"device": args.device, "model": spec.name, "steps": args.steps, "error": str(exc)},
                      args.json)
        return 1
    emit(report, json_path=args.json, html_path=args.html)
    return 0
