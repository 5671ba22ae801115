"""`torchfl audit`: run a model or script on the CPU under the CUDA alias and report every device
request with the source line that made it.

In script mode audit's ``--strict`` and ``--json`` may come anywhere on the line; arguments after ``--``
go to the script unchanged.

Exit status: 0 when the run completed (with ``--strict``: 1 when it made a CUDA request); 1 when the
model raised; in script mode the script's own non-zero exit code wins.
"""

from __future__ import annotations

import argparse
import os
import sys

from .args import STDOUT, add_report_files, command_parser
from .exits import CommandError, UsageError

OK, FOUND = 0, 1


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, model="optional")
    parser.add_argument("--train", action="store_true", help="run backward too (model mode)")
    add_report_files(parser, html=False, schema="torchfl docs migrate-runtime")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the run made a CUDA request")
    parser.add_argument("--script", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]",
                        help="audit a script run with its arguments instead of a model (must come last); "
                             "--strict and --json there are audit's, arguments after -- are the script's")
    _keep_script_tail(parser)


def _keep_script_tail(parser: argparse.ArgumentParser) -> None:
    """Everything after a `--` that follows --script goes to the script. argparse ends an option's
    REMAINDER at `--` and hands the rest to the MODEL positional, so this parser cuts the tail off
    before parsing and puts it in `script_tail`."""
    parse = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):  # type: ignore[no-untyped-def]
        args = list(sys.argv[1:] if args is None else args)
        tail: list[str] = []
        if "--script" in args and "--" in args[args.index("--script"):]:
            cut = args.index("--", args.index("--script"))
            args, tail = args[:cut], args[cut + 1:]
        namespace, extra = parse(args, namespace)
        namespace.script_tail = tail
        return namespace, extra

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


# audit's own options that may follow --script SCRIPT (argparse's REMAINDER hands them to the script):
# option -> what it takes: False nothing, else the value it has without one (--json alone: stdout).
_OWN_AFTER_SCRIPT: dict[str, str | bool] = {"--strict": False, "--json": STDOUT}


def split_script_args(args: argparse.Namespace) -> str | None:
    """Take audit's own options out of `--script SCRIPT ARGS...` (the `script_tail`, after a `--`, stays
    the script's); returns an error text, or None. Each option taken is announced on stderr, so a script
    that has an option of the same name knows to pass it after `--`."""
    rest = list(args.script or [])
    if not rest:
        return None
    script, head = rest[0], rest[1:]
    after = list(getattr(args, "script_tail", []))
    if script.startswith("-"):
        return f"--script needs the script first, got {script!r}: torchfl audit --script train.py [ARGS]"
    kept: list[str] = []
    i = 0
    while i < len(head):
        name, eq, value = head[i].partition("=")
        if name not in _OWN_AFTER_SCRIPT:
            kept.append(head[i])
            i += 1
            continue
        alone = _OWN_AFTER_SCRIPT[name]
        if alone is not False:
            if not eq:
                if i + 1 < len(head) and not head[i + 1].startswith("-"):
                    value, i = head[i + 1], i + 1
                else:
                    value = str(alone)
            setattr(args, name[2:], value)
        elif eq:
            return f"{name} takes no value, got {head[i]!r}"
        else:
            setattr(args, name[2:], True)
        print(f"torchfl audit: {name} after --script is audit's option; to give it to {script}, put it after "
              f"--: torchfl audit --script {script} -- {name}", file=sys.stderr)
        i += 1
    args.script = [script, *kept, *after]
    return None


def run(args: argparse.Namespace) -> int:
    from ..migrate.audit import audit_model, audit_script
    from ..report import end_progress, progress
    from .output import emit

    if args.script is not None:
        problem = split_script_args(args)
        if problem:
            raise UsageError(problem)
        if not args.script or args.model:
            raise UsageError("give either MODEL or --script SCRIPT [ARGS]")
        script, argv = args.script[0], args.script[1:]
        if not os.path.isfile(script):
            raise CommandError(f"{script}: no such file")
        from ..migrate.script import run_target

        progress(f"running {script} under the audit")
        end_progress()  # no status line while the script writes to the same terminal
        report, code = audit_script(lambda: run_target(script, None, argv), script)
        # The script's output came first: keep the report apart from it.
        sys.stdout.flush()
        emit(report, json_path=args.json)
        if code:
            return code
    else:
        if not args.model:
            raise UsageError("give a MODEL (path.py:factory) or --script SCRIPT [ARGS]")
        progress(f"auditing {args.model}{' (train)' if args.train else ''}")
        report, error = audit_model(args.model, train=args.train)
        emit(report, json_path=args.json)
        if error is not None:
            return FOUND
    return FOUND if args.strict and report.data["summary"]["cuda_requests"] else OK
