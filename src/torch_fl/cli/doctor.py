"""``torchfl doctor``: parses its arguments and prints what torch_fl.analysis.doctor examined (the facts, a
self-check, and a next step for each problem). Exit code 0: healthy; 1: a problem was found.
"""

from __future__ import annotations

import argparse
import json

from ..analysis.doctor import examine
from .args import add_device


# Command ------------------------------------------------------------------------------------------
def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name, help=help_text,
        description="Report the backend, device, plugin and versions torch-fl sees, run a small matmul "
                    "self-check, and explain any problem with a next step. Exit code 0: healthy; "
                    "1: a problem was found.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_device(parser, what="device to check")


def run(args: argparse.Namespace) -> int:
    report = examine(args.device)
    print(json.dumps(report.json(), indent=2) if args.json else report.text())
    return 0 if report.healthy else 1
