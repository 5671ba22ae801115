"""``torchfl doctor``: parses its arguments and prints what torch_fl.analysis.doctor examined (the facts, a
self-check, and a next step for each problem). Exit code 0: healthy; 1: a problem was found; 2: --device names
no device (bad input, as in every command; the report is printed all the same). The vendor
plugin is imported in a child process first, so a plugin that crashes is reported instead of ending doctor.
"""

from __future__ import annotations

import argparse

from .args import add_device, add_json, positive_seconds


# Command ------------------------------------------------------------------------------------------
def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name, help=help_text,
        description="Report the backend, device, plugin and versions torch-fl sees, run a small matmul "
                    "self-check, and explain any problem with a next step. Exit code 0: healthy; "
                    "1: a problem was found; 2: --device names no device (the report is printed all the same).")
    add_json(parser, what="the report (one object)")
    add_device(parser, what="device to check")
    parser.add_argument("--bisect-env", action="store_true",
                        help="when the plugin's import fails, re-run it in child processes with LD_LIBRARY_PATH, "
                             "PYTHONPATH and LD_PRELOAD entries removed: print the entry that breaks it and the "
                             "minimal working value")
    parser.add_argument("--plugin-timeout", type=positive_seconds, default=None, metavar="SECONDS",
                        help="seconds the plugin's import (in a child process) may take before it is stopped "
                             "and reported as stuck (default 120)")


def run(args: argparse.Namespace) -> int:
    from ..analysis.doctor import examine  # torch: here, not at import (`torchfl doctor --help` needs none)
    from .output import emit

    report = examine(args.device, plugin_timeout=args.plugin_timeout, bisect_env=args.bisect_env)
    emit(report.report(), json_path=args.json)  # the text, and the JSON (report.json()) for --json
    if args.device and not _resolves(args.device):
        return 2  # bad input, as every command's --device (issue 42); the report above says why
    return 0 if report.healthy else 1


def _resolves(spec: str) -> bool:
    from ..device import resolve_spec
    from ..errors import DeviceNotFoundError, UnknownDescriptionError

    try:
        resolve_spec(spec)
    except (DeviceNotFoundError, UnknownDescriptionError):
        return False
    return True
