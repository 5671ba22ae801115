"""`torchfl compare`: a model's numbers on a device against a reference, module by module.

Exit status: 0 when every module, the output (and with --train every gradient) is within tolerance, 1
otherwise or when the device cannot run the model (an unsupported operator), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import math

from .args import add_report_files, command_parser
from .exits import UsageError

# analysis.compare's DTYPES and DEFAULT_TOLERANCES, for the help: that module imports torch, and `torchfl
# compare --help` needs none (tests/cli/test_help.py checks the copies are equal).
DTYPES = ("float32", "float16", "bfloat16", "float64")
DEFAULT_TOLERANCES = {"float64": (1e-7, 1e-7), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-5),
                      "bfloat16": (8e-2, 1e-5)}


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    defaults = ", ".join(f"{d} {r:g}/{a:g}" for d, (r, a) in DEFAULT_TOLERANCES.items())
    parser = command_parser(sub, name, help_text, model="required", reference=True, values={"defaults": defaults},
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
    from ..report import progress
    from .output import emit_model_run

    for flag in ("rtol", "atol"):
        value = getattr(args, flag)
        if value is not None and not (math.isfinite(value) and value >= 0):  # nan compares false: all "pass"
            raise UsageError(f"--{flag} must be a finite number >= 0, got {value}")

    def measure(spec):
        progress(f"comparing {spec.name} on {args.device} against {args.reference} ({args.dtype}"
                 + (", train)" if args.train else ")"))
        return compare(spec, args.device, args.reference, dtype=args.dtype, train=args.train, rtol=args.rtol,
                       atol=args.atol, seed=args.seed)

    # A device that cannot run the model at all: which op, without a traceback.
    return emit_model_run("torchfl compare", args, measure, routing=False,
                          failure=lambda spec, error: {"model": spec.name, "device": args.device,
                                                       "reference": args.reference, "dtype": args.dtype,
                                                       "train": args.train, "error": error, "ok": False},
                          status=lambda report: 0 if report.data["ok"] else 1)
