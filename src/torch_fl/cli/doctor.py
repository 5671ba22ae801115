"""``torchfl doctor``: parses its arguments and prints what torch_fl.analysis.doctor examined (the facts, a
self-check, and a next step for each problem). Exit code 0: healthy; 1: a problem was found.
"""

from __future__ import annotations

import argparse

from .args import add_device, add_json


# Command ------------------------------------------------------------------------------------------
def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name, help=help_text,
        description="Report the backend, device, plugin and versions torch-fl sees, run a small matmul "
                    "self-check, and explain any problem with a next step. Exit code 0: healthy; "
                    "1: a problem was found.")
    add_json(parser, what="the report (one object)")
    add_device(parser, what="device to check")


def run(args: argparse.Namespace) -> int:
    from ..analysis.doctor import examine  # torch: here, not at import (`torchfl doctor --help` needs none)
    from .output import emit

    report = examine(args.device)
    emit(report.report(), json_path=args.json)  # the text, and the JSON (report.json()) for --json
    return 0 if report.healthy else 1
