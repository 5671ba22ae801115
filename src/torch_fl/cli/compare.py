"""`torchfl compare`: a model's numbers on a device against a reference, module by module.

Exit status: 0 when every module, the output (and with --train every gradient) is within tolerance, 1
otherwise or when the device cannot run the model (an unsupported operator), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import math
import sys

from .args import add_report_files, command_parser
from .exits import UsageError

# analysis.compare's DTYPES and DEFAULT_TOLERANCES, for the help: that module imports torch, and `torchfl
# compare --help` needs none (tests/cli/test_help.py checks the copies are equal).
DTYPES = ("float32", "float16", "bfloat16", "float64")
DEFAULT_TOLERANCES = {"float64": (1e-7, 1e-7), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-5),
                      "bfloat16": (8e-2, 1e-5)}


DESCRIPTION = ("Run MODEL with the same weights and inputs on the reference (routing off) and on "
               "the device (routing on), compare every module's output, the final output and with "
               "--train every parameter's gradient, and name the first module outside tolerance.")
_DEFAULTS = ", ".join(f"{d} {r:g}/{a:g}" for d, (r, a) in DEFAULT_TOLERANCES.items())
EPILOG = ("Tolerances are normwise: max|device - reference| <= atol + rtol * max|reference| per "
          f"tensor. Defaults (rtol/atol): {_DEFAULTS}; the device description's "
          "precision.tolerances and precision.op_tolerances refine them, --rtol/--atol override.\n"
          "Examples:\n  torchfl compare examples/gpt.py:factory --device emu:minimal\n"
          "  torchfl compare examples/gpt.py:factory --device acc0 --dtype bfloat16 --train "
          "--json cmp.json --html cmp.html\n"
          "Exit status: 0 within tolerance, 1 outside tolerance or the device cannot run the model.")


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, DESCRIPTION, EPILOG, model="required", reference=True,
                            device={"required": True, "what": "device under test (routing active)"})
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="cast floating-point parameters, buffers and inputs to this dtype "
                             "(default: float32)")
    parser.add_argument("--train", action="store_true",
                        help="also run the backward pass and compare every parameter's gradient")
    parser.add_argument("--rtol", type=float, metavar="X", help="relative tolerance (overrides the "
                                                               "dtype's default and the description's)")
    parser.add_argument("--atol", type=float, metavar="Y", help="absolute tolerance (same)")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed set before both runs (default 0)")
    add_report_files(parser)


def run(args: argparse.Namespace) -> int:
    from ..analysis.compare import compare
    from ..analysis.model import load_model
    from ..errors import UnsupportedOperatorError
    from ..report import end_progress, progress
    from .output import emit, emit_json

    for flag in ("rtol", "atol"):
        value = getattr(args, flag)
        if value is not None and not (math.isfinite(value) and value >= 0):  # nan compares false: all "pass"
            raise UsageError(f"--{flag} must be a finite number >= 0, got {value}")
    progress(f"loading {args.model}")
    spec = load_model(args.model)
    progress(f"comparing {spec.name} on {args.device} against {args.reference} ({args.dtype}"
             + (", train)" if args.train else ")"))
    try:
        report = compare(spec, args.device, args.reference, dtype=args.dtype, train=args.train,
                         rtol=args.rtol, atol=args.atol, seed=args.seed)
    except UnsupportedOperatorError as exc:
        end_progress()
        # The device cannot run the model at all: say which op, without a traceback.
        print(f"torchfl compare: {args.device} cannot run {spec.name}:\n{exc}", file=sys.stderr)
        if args.json:
            emit_json({"model": spec.name, "device": args.device, "reference": args.reference,
                       "dtype": args.dtype, "train": args.train, "error": str(exc), "ok": False}, args.json)
        return 1
    emit(report, json_path=args.json, html_path=args.html)
    return 0 if report.data["ok"] else 1
