"""`torchfl bench`: steps per second of a model with torch-fl routing on vs off on one device.

Exit status: 0 when both modes ran (the alignment ratio and the leak flag are results, in the report and
the JSON), 1 when the routed run cannot run the model (an unsupported operator), 2 on a usage error.
"""

from __future__ import annotations

import argparse

from .args import add_report_files, add_train, command_parser


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, model="required", device={"required": True},
                            steps={"steps": 20, "warmup": 3})
    add_train(parser)
    add_report_files(parser)


def run(args: argparse.Namespace) -> int:
    from ..analysis.bench import bench
    from ..analysis.profile import add_citation
    from .output import emit_model_run

    def measure(spec):
        report = bench(spec, args.device, steps=args.steps, warmup=args.warmup, train=args.train)
        data = report.data
        # (bench's own warning's test; a ratio load made unmeasurable says nothing of the routed ops)
        if data["alignment"] < data["target"] and not data.get("emulated") and not data["load"]["loaded"]:
            add_citation(report, spec, args.device, train=args.train)
        return report

    return emit_model_run("torchfl bench", args, measure)
