"""`torchfl profile`: a model's steps under torch.profiler with routing active; time by route, the top ops
by self time with their routes, host<->device copies, host syncs by source line, and the Chrome/Perfetto
trace.

Exit status: 0 profiled, 1 the device cannot run the model (an unsupported operator), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import shlex

from .args import add_report_files, add_train, command_parser
from .exits import CommandError, UsageError


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, model="required", device={"required": True},
                            steps={"steps": 5, "warmup": 2, "steps_help": "profiled steps"})
    add_train(parser, what="profile training steps")
    parser.add_argument("--trace", metavar="FILE",
                        help="write the Chrome/Perfetto trace of the profiled steps to FILE (.json)")
    parser.add_argument("--args", dest="script_args", metavar="'ARGS'", type=shlex.split, default=[],
                        help="with a script as MODEL (path/to/train.py): its arguments, one string split as a shell "
                             "splits it (--args='--epochs 1 --lr 0.1')")
    parser.add_argument("--timeline", metavar="FILE",
                        help="write one profiled step of the trace as a self-contained HTML timeline to FILE (host "
                             "threads with their ranges, the device's streams; opens offline, no viewer needed)")
    add_report_files(parser)


def run(args: argparse.Namespace) -> int:
    from ..analysis.model import ModelSpec
    from ..analysis.profile import profile_model, report, timeline_html
    from ..report import Report
    from .output import check_folder, emit_model_run

    for flag, path in (("--trace", args.trace), ("--timeline", args.timeline)):
        if path:
            check_folder(path, flag)

    if _is_script(args.model):
        return _run_script(args)
    if args.script_args:
        raise UsageError(f"--args are a script's arguments ({shlex.join(args.script_args)}), and {args.model} is a "
                         f"model entry point (file.py:factory); give a script (train.py) or drop --args")

    def run_one(spec: ModelSpec) -> Report:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as scratch:  # (the timeline is drawn from a trace)
            trace = args.trace or (str(Path(scratch) / "trace.json") if args.timeline else None)
            profiled = profile_model(spec, args.device, steps=args.steps, warmup=args.warmup, train=args.train,
                                     trace=trace)
            if args.timeline:
                Path(args.timeline).write_text(timeline_html(trace, title=f"torchfl profile {spec.name} on "
                                                                          f"{args.device}"))
        return profiled if args.trace or not args.timeline else report({**profiled.data, "trace": None})

    return emit_model_run("torchfl profile", args, run_one)


def _is_script(model: str) -> bool:
    """A script to run (train.py), not a model entry point (file.py:factory, package.module:factory)."""
    return model.endswith(".py") and ":" not in model.rpartition("/")[2]


def _run_script(args: argparse.Namespace) -> int:
    """`torchfl profile train.py --device D --args='ARGS'`: the script's optimizer steps profiled (profile_script)."""
    import os
    import tempfile
    from pathlib import Path

    from ..analysis.profile import profile_script, report, timeline_html
    from .output import emit

    if not os.path.isfile(args.model):
        raise CommandError(f"{args.model}: no such file")
    with tempfile.TemporaryDirectory() as scratch:
        trace = args.trace or (str(Path(scratch) / "trace.json") if args.timeline else None)
        try:
            profiled, code = profile_script(args.model, args.script_args, args.device, steps=args.steps,
                                            warmup=args.warmup, trace=trace)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if args.timeline:
            Path(args.timeline).write_text(timeline_html(trace, title=f"torchfl profile {args.model} on "
                                                                      f"{args.device}"))
    if trace and not args.trace:
        profiled = report({**profiled.data, "trace": None})
    emit(profiled, json_path=args.json, html_path=args.html)
    return code
