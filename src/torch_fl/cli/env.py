"""``torchfl env lock | check | diff``: the versions that matter on a node (torch, Python, plugins, runtimes,
description hashes, torch-fl), written to a lock file and every node checked against it
(torch_fl.analysis.envlock). Exit status: 0 same; 1 a component differs; 2 usage or a file that is not a lock.
"""

from __future__ import annotations

import argparse

from ..report import plural
from .args import STDOUT, add_actions, add_json, command_parser
from .exits import UsageError
from .output import emit


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text)
    actions = add_actions(parser)
    lock = actions.add_parser("lock", help="write this node's versions to a lock file")
    lock.add_argument("-o", "--output", default="torchfl-env.lock", metavar="FILE",
                      help="the lock file to write ('-': print it; default torchfl-env.lock)")
    check = actions.add_parser("check", help="check this node against a lock file; exit 1 naming each "
                                             "component that differs")
    check.add_argument("lock", metavar="LOCK", help="a lock file written by `torchfl env lock`")
    add_json(check, what="the differences")
    diff = actions.add_parser("diff", help="compare the lock files of several nodes with the first")
    diff.add_argument("locks", nargs="+", metavar="LOCK", help="lock files, the reference first")
    add_json(diff, what="whether the nodes match")
    add_json(lock, what="the lock written")


def run(args: argparse.Namespace) -> int:
    from ..analysis import envlock
    from ..report import Report

    if args.action == "lock":
        lock = envlock.snapshot()
        if args.output == STDOUT:
            emit(Report("torchfl env lock", lock), json_path=STDOUT)
        else:
            envlock.write(args.output, lock)
            emit(Report("torchfl env lock", lock, text=f"wrote {args.output}: "
                        f"{plural(len(lock['components']), 'component')} of node {lock['node']}\n"),
                 json_path=args.json)
        return 0
    if args.action == "check":
        lock, here = envlock.read(args.lock), envlock.snapshot()
        same, lines = envlock.report(lock, here, args.lock)
        data = {"node": here["node"], "lock": args.lock, "same": same,
                "differences": [vars(d) | {"fix": d.fix()} for d in envlock.compare(lock, here)]}
        emit(Report("torchfl env check", data, text="\n".join(lines) + "\n"), json_path=args.json)
        return 0 if same else 1
    if len(args.locks) < 2:
        raise UsageError("give at least two lock files (the reference first)")
    same, lines = envlock.diff_nodes([(path, envlock.read(path)) for path in args.locks])
    emit(Report("torchfl env diff", {"same": same, "locks": args.locks}, text="\n".join(lines) + "\n"),
         json_path=args.json)
    return 0 if same else 1
