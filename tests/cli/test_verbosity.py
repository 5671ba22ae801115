"""-q and -v on every command and every action (issue 42/43: -q on 10 of 17 commands, no -v)."""

from __future__ import annotations

import argparse
import logging

import pytest

from torch_fl.cli import COMMANDS, build_parser, main


def _leaves() -> list[list[str]]:
    """Every command, and every action of a command that has actions (routes show, cache verify, ...)."""
    found = []
    for name in COMMANDS:
        parser = build_parser([name])._subparsers._group_actions[0].choices[name]
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        found += [[name, action] for action in actions[0].choices] if actions else [[name]]
    return found


LEAVES = _leaves()


@pytest.mark.parametrize("argv", LEAVES, ids=" ".join)
def test_every_command_takes_quiet_and_verbose(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert "-q, --quiet" in out and "-v, --verbose" in out


def test_verbose_turns_torch_fls_log_up_for_the_command(capsys):
    root = logging.getLogger("torch_fl")
    before = root.level
    try:
        assert main(["docs", "-vv"]) == 0
        assert root.level == logging.DEBUG
        assert main(["docs", "-v"]) == 0
        assert root.level == logging.INFO
    finally:
        root.setLevel(before)
    args = build_parser(["docs"]).parse_args(["docs"])
    assert args.verbose == 0 and args.quiet is False
