"""`torchfl audit`: run a model or script on the CPU under the CUDA alias and report every device
request with the source line that made it.

Exit status: 0 when the run completed (with ``--strict``: 1 when it made a CUDA request); 1 when the
model raised; in script mode the script's own non-zero exit code wins.
"""

from __future__ import annotations

import argparse
import os
import sys

from .args import add_report_files

OK, FOUND = 0, 1


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name, help=help_text,
        description="Run a model (forward; backward with --train) or a whole script on this machine's "
                    "CPU with the CUDA alias active, and list every device request: each call that "
                    "carried a device argument, each .to(device), .cuda() and torch.cuda.* call, with "
                    "file:line and the text of the line. CUDA requests are flagged.",
        epilog="Examples:\n"
               "  torchfl audit examples/gpt.py:factory --train\n"
               "  torchfl audit mypkg.models:build --json audit.json --strict\n"
               "  torchfl audit --script train.py --max_iters=2\n"
               "\nExit status: 0; with --strict, 1 when a CUDA request was made; 1 when the model "
               "raised; a script's own non-zero exit code.\nDocs: docs/migrate-runtime.md",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", metavar="MODEL",
                        help="model entry point: path/to/file.py:factory or package.module:factory")
    parser.add_argument("--train", action="store_true", help="run backward too (model mode)")
    add_report_files(parser, html=False, schema="docs/migrate-runtime.md")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the run made a CUDA request")
    parser.add_argument("--script", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]",
                        help="audit a script run with its arguments instead of a model (must come last)")


def run(args: argparse.Namespace) -> int:
    from ..analysis.report import emit, progress
    from ..migrate.audit import audit_model, audit_script

    if args.script is not None:
        if not args.script or args.model:
            print("torchfl audit: give either MODEL or --script SCRIPT [ARGS]", file=sys.stderr)
            return 2
        script, argv = args.script[0], args.script[1:]
        if not os.path.isfile(script):
            print(f"torchfl audit: {script}: no such file", file=sys.stderr)
            return 2
        from .run import run_target

        progress(f"running {script} under the audit")
        report, code = audit_script(lambda: run_target(script, None, argv), script)
        # The script's output came first: keep the report apart from it.
        sys.stdout.flush()
        emit(report, json_path=args.json)
        if code:
            return code
    else:
        if not args.model:
            print("torchfl audit: give a MODEL (path.py:factory) or --script SCRIPT [ARGS]", file=sys.stderr)
            return 2
        progress(f"auditing {args.model}{' (train)' if args.train else ''}")
        report, error = audit_model(args.model, train=args.train)
        emit(report, json_path=args.json)
        if error is not None:
            return FOUND
    return FOUND if args.strict and report.data["summary"]["cuda_requests"] else OK
