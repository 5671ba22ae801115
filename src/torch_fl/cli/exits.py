"""The exit status of every ``torchfl`` command: one table, applied by torch_fl.cli.main to whatever a
command returns or raises, and printed in docs/cli.md ("Exit status"; tests/cli/test_conventions.py checks
that the page lists this table).

The convention is diff's, grep's and ruff's: 1 is an answer (a finding, a difference, a failed check), 2 is
"could not do what was asked". So a CI job that reads 1 as "scan found something" is never misled by a
command that did not run: a usage error, bad input, an unknown device and a missing dependency (torch,
libcst) all exit 2, in every command.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["BAD_INPUT", "DEPENDENCIES", "EXIT_CODES", "FAILED", "INTERRUPTED", "MISSING_DEPENDENCY", "OK", "USAGE",
           "CommandError", "ExitCode", "UsageError", "markdown_table", "missing_dependency"]


class ExitCode(NamedTuple):
    code: int
    name: str
    meaning: str


OK = 0
FAILED = 1
USAGE = BAD_INPUT = MISSING_DEPENDENCY = 2
INTERRUPTED = 130  # a shell's 128 + SIGINT, for Ctrl-C

EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(OK, "ok", "the command did what it was asked (a report command also when its report lists problems: "
                       "see each command)"),
    ExitCode(FAILED, "finding or failure", "a finding or a failed check (`scan` findings, `fix --diff` changes, "
                                           "`doctor` problems, `compare` outside tolerance, `routes diff` and "
                                           "`env check` differences, `cache verify` corruption), or running "
                                           "failed: the user's model or script raised, a plugin or device failed, "
                                           "an internal error"),
    ExitCode(USAGE, "could not run as asked", "a usage error (an option or sub-action argparse refuses, options "
                                              "that do not go together: the sub-command's own usage is printed), "
                                              "bad input (a path that does not exist or cannot be written, a "
                                              "description, device name, `FL_*` value, config file or model entry "
                                              "point that is wrong, invalid TOML, a file that is not UTF-8), or a "
                                              "missing dependency (torch; libcst for `fix`), the same in every "
                                              "command"),
    ExitCode(INTERRUPTED, "interrupted", "Ctrl-C"),
)

# A missing dependency: the top-level module -> how to install it (extras in pyproject.toml).
DEPENDENCIES: dict[str, str] = {"torch": "pip install torch", "libcst": "pip install 'torch-fl[migrate]'",
                                "detect_secrets": "pip install 'torch-fl[redact]'"}


class CommandError(Exception):
    """An error a command reports as one line, ``torchfl CMD: error: MESSAGE``, with exit status `code`."""

    def __init__(self, message: str, code: int = BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


class UsageError(CommandError):
    """Options or arguments that do not go together (argparse cannot tell): the sub-command's usage line,
    then the message, exit status 2, as argparse's own errors."""

    def __init__(self, message: str) -> None:
        super().__init__(message, USAGE)


def missing_dependency(exc: BaseException) -> str | None:
    """The name of the dependency whose absence `exc` (or an exception it was raised from) reports, when it is
    one of DEPENDENCIES; else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError):
            top = (current.name or "").split(".")[0]
            if top in DEPENDENCIES:
                return top
        current = current.__cause__ or current.__context__
    return None


def markdown_table() -> str:
    """The table as docs/cli.md prints it ("Exit status")."""
    rows = [f"| {entry.code} | {entry.name}: {entry.meaning} |" for entry in EXIT_CODES]
    return "\n".join(["| code | meaning |", "| --- | --- |", *rows])
