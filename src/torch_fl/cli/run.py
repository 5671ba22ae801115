"""`torchfl run`: run an unmodified CUDA-hard-coded script on torch.fl.device() (the CUDA alias).

Exit status: the script's (0 when it returns, its ``sys.exit`` code, 1 when it raises).
"""

from __future__ import annotations

import argparse
import os
import sys

from .args import add_device, command_parser
from .exits import CommandError, UsageError


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text)
    add_device(parser, what="where CUDA requests run")
    parser.add_argument("--report", action="store_true",
                        help="after the script, print to stderr which CUDA queries the alias answered from the "
                             "description (capability, properties, ...) and which CUDA settings it accepted")
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS]",
                        help="run a library module as a script (as python -m), with its arguments")
    parser.add_argument("script", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]",
                        help="the script to run, with its arguments")


def run(args: argparse.Namespace) -> int:
    from ..migrate.alias import active, cuda_alias
    from ..migrate.script import run_target

    if args.module is not None:
        if not args.module:
            raise UsageError("-m needs a module name")
        script, module, argv = None, args.module[0], args.module[1:]
    elif args.script:
        script, module, argv = args.script[0], None, args.script[1:]
        if not os.path.isfile(script):
            raise CommandError(f"{script}: no such file")
    else:
        raise UsageError("give a script (torchfl run train.py ARGS) or a module (-m MODULE ARGS)")
    alias = active()
    if alias is not None:  # FL_CUDA_ALIAS=1 already enabled it when torch was imported
        if args.device:
            print(f"torchfl run: FL_CUDA_ALIAS is set: the alias targets torch.fl.device(), not "
                  f"--device {args.device}", file=sys.stderr)
        code = run_target(script, module, argv)
    else:
        with cuda_alias(args.device) as alias:
            code = run_target(script, module, argv)
    if args.report:
        from ..report import Report
        from .output import emit

        # stdout is the script's: the alias's report goes to stderr
        emit(Report("the CUDA alias", {}, text=alias.report() + "\n"), stream=sys.stderr)
    return code
