"""`torchfl grade`: the L0/L1/L2 level of a model on a device, from measurements.

Exit status: 0 whenever grading ran, whatever level came out (the level is the result: in the report and
the JSON); 2 on a usage error or bad input (an entry point or device name that is wrong), as in every
command (docs/cli.md); 1 when the model's own code raises or the device fails.
"""

from __future__ import annotations

import argparse

from ..report import plural
from .args import add_report_files, command_parser

USAGE = 2
# analysis.grade's defaults, for the help: that package imports torch, and `torchfl grade --help` needs none
# (tests/cli/test_help.py checks the copies are equal).
DEFAULT_STEPS, DEFAULT_WARMUP = 30, 3


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, model="required", reference=True,
                            device={"required": True, "what": "device to grade"},
                            steps={"steps": DEFAULT_STEPS, "warmup": DEFAULT_WARMUP, "what": "bench: ",
                                   "steps_help": "timed training steps per mode, for alignment and the memory run",
                                   "note": "; 4 or more for a memory verdict"})
    parser.add_argument("--compile", action="store_true",
                        help="measure torch.compile with the description's backend (a cold compile takes "
                             "tens of seconds); without it the compile criterion is NOT MEASURED")
    parser.add_argument("--no-preflight", dest="preflight", action="store_false",
                        help="do not run torch.fl.distributed's preflight in two spawned processes "
                             "(the distributed criterion is then NOT MEASURED)")
    add_report_files(parser)


def _alignment_below_target(data: dict) -> bool:
    """Whether the alignment criterion was measured below its threshold (FAIL, or INCONCLUSIVE under it), on a
    machine quiet enough to measure it (a ratio load made unmeasurable says nothing of the routed ops)."""
    from ..analysis.grade import FAIL, INCONCLUSIVE
    from ..analysis.grade.levels import unmeasurable

    row = next((r for r in data["criteria"] if r["id"] == "l1.alignment"), None)
    return (row is not None and row["status"] in (FAIL, INCONCLUSIVE)
            and not unmeasurable(data["measurements"].get("bench"))
            and isinstance(row["measured"], (int, float)) and row["measured"] < data["thresholds"]["alignment"])


def _native_but_slow(report) -> None:
    """Coverage's 'native but slow' class in grade's text: the native ops the description's [ops.slow]
    (written by torchfl ops-bench) lists, a warning of their own (they count as native in the share)."""
    slow = (report.data["measurements"].get("coverage") or {}).get("native_slow") or []
    if not slow:
        return
    calls = sum(op["calls"] for op in slow)
    names = ", ".join(f"{op['op']} ({op['dtype'] or 'any dtype'})" for op in slow[:5])
    more = f" and {len(slow) - 5} more" if len(slow) > 5 else ""
    report.summary.append(("native but slow", f"{plural(calls, 'call')} of {plural(len(slow), '(op, dtype) pair')} "
                                              f"(torchfl ops-bench)"))
    report.warnings.append(f"native but slow on {report.data['device']}: {names}{more} run natively, but "
                           f"torchfl ops-bench found a faster alternative ([ops.slow] of the description)")


def run(args: argparse.Namespace) -> int:
    from ..analysis.grade import grade
    from ..analysis.model import load_model
    from ..report import progress
    from .output import emit

    progress(f"loading {args.model}")
    spec = load_model(args.model)
    report = grade(spec, args.device, args.reference, steps=args.steps, warmup=args.warmup,
                   compile=args.compile, preflight=args.preflight)
    _native_but_slow(report)
    if _alignment_below_target(report.data):
        from ..analysis.profile import add_citation

        add_citation(report, spec, args.device)
    emit(report, json_path=args.json, html_path=args.html)
    return 0
