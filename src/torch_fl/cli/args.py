"""Arguments several commands share, spelled and explained once: MODEL, --device, --reference, --steps,
--json/--html, --quiet, --verbose.

A command adds them with these helpers so that ``torchfl bench --help`` and ``torchfl grade --help`` say
the same thing about the same flag, and a new command gets them right by calling one function.

Example::

    def add_parser(sub, name, help_text):  # its description and epilog: cli/texts.py, under its name
        parser = command_parser(sub, name, help_text, model="required", device={"required": True})
        parser.add_argument("--train", action="store_true", help="...")
        add_report_files(parser)
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
    "DEVICES",
    "MAX_COUNT",
    "MAX_SECONDS",
    "STDOUT",
    "add_actions",
    "add_device",
    "add_json",
    "add_model",
    "add_quiet",
    "add_reference",
    "add_report_files",
    "add_steps",
    "add_train",
    "add_verbose",
    "command_parser",
    "count_up_to",
    "non_negative_int",
    "positive_int",
    "positive_seconds",
]

STDOUT = "-"  # --json's value for "print the JSON instead of the text"

DEVICES = "acc0, cuda:1, cpu, emu:NAME"  # what --device accepts, in every command's help
DESCRIPTIONS = "a description name (cuda, npu, ...) or .toml file"  # where a description is enough


def command_parser(sub: argparse._SubParsersAction, name: str, help_text: str, *, model: str | None = None,
                   device: dict[str, Any] | None = None, reference: bool = False, steps: dict[str, Any] | None = None,
                   values: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The subcommand's parser: its one-line help, and the description and epilog (examples, exit status,
    docs) of cli/texts.py under `name` (their {fields} filled from `values`), printed as written (line breaks
    kept), with the arguments the measuring commands share, in one order: MODEL (`model` "required" or
    "optional", add_model), --device (`device`: add_device's keywords), --reference (add_reference),
    --steps/--warmup (`steps`: add_steps' keywords). -q and -v every command gets from torch_fl.cli;
    --json/--html the command adds last (add_report_files, add_json)."""
    from .texts import TEXTS

    text = TEXTS.get(name)
    if text is None:
        raise LookupError(f"the command {name!r} has no help text: add its description and epilog to TEXTS in "
                          f"torch_fl/cli/texts.py")
    description, epilog = ((part if part is None or values is None else part.format(**values)) for part in text)
    parser = sub.add_parser(name, help=help_text, description=description, epilog=epilog,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    if model is not None:
        add_model(parser, optional=model == "optional")
    if device is not None:
        add_device(parser, **device)
    if reference:
        add_reference(parser)
    if steps is not None:
        add_steps(parser, **steps)
    return parser


def add_actions(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """The ACTION of a command that has several (routes show|diff, cache info|verify|clear, env lock|check|diff):
    required, in `args.action`; each action's parser gets -q/-v and its errors its own usage from torch_fl.cli."""
    return parser.add_subparsers(dest="action", metavar="ACTION", required=True)


def add_model(parser: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """MODEL: the model entry point (analysis.model.load_model reads it)."""
    parser.add_argument("model", metavar="MODEL", nargs="?" if optional else None,
                        help="model entry point, path/to/file.py:factory or package.module:factory")


def add_steps(parser: argparse.ArgumentParser, *, steps: int, warmup: int, what: str = "",
              steps_help: str = "timed steps per mode", note: str = "") -> None:
    """--steps N and --warmup W of the commands that time steps (`what` prefixes both helps, 'bench: ';
    `note` ends the --steps help, after its default)."""
    parser.add_argument("--steps", type=positive_int, default=steps, metavar="N",
                        help=f"{what}{steps_help} (default {steps}{note})")
    parser.add_argument("--warmup", type=non_negative_int, default=warmup, metavar="W",
                        help=f"{what}untimed steps per mode before timing (default {warmup})")


def add_train(parser: argparse.ArgumentParser, *, what: str = "time training steps",
              without: str = "inference forwards") -> None:
    """--train/--no-train of the commands that run MODEL's steps, training by default (`what` they do with a
    training step, and `without` it)."""
    parser.add_argument("--train", action=argparse.BooleanOptionalAction, default=True,
                        help=f"{what} (forward, backward, AdamW update; default) or, with --no-train, {without}")


def add_device(parser: argparse.ArgumentParser, *, required: bool = False, what: str = "device",
               descriptions: bool = False) -> None:
    """--device D: `what` the command acts on; with `descriptions`, a description (name or file) is accepted
    too (the chip it describes); without `required`, the default is torch.fl.device()."""
    accepts = DEVICES + (f", or {DESCRIPTIONS}" if descriptions else "")
    default = "" if required else "; default: torch.fl.device()"
    parser.add_argument("--device", required=required, metavar="D", help=f"{what}: {accepts}{default}")


def add_reference(parser: argparse.ArgumentParser) -> None:
    """--reference R: the device a comparison runs on with routing deactivated (default cpu)."""
    parser.add_argument("--reference", default="cpu", metavar="R",
                        help="reference device, run with routing deactivated (default: cpu)")


def add_json(parser: argparse.ArgumentParser, *, what: str = "the result", schema: str | None = None) -> None:
    """--json [FILE], the same in every command: FILE gets the JSON and the text is printed as usual;
    --json alone (or --json -) prints the JSON instead of the text. (Before positional arguments, write
    --json - or --json=FILE: a bare --json there would take the next word as its FILE.)"""
    where = f" (schema: {schema})" if schema else ""
    parser.add_argument("--json", nargs="?", const=STDOUT, metavar="FILE",
                        help=f"{what} as JSON{where}: written to FILE, or printed instead of the text with "
                             f"--json alone or --json -")


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """-q/--quiet: no progress lines (a command whose stages can take more than ~2 s prints them on stderr,
    and only when stderr is a terminal; torch_fl.report.progress)."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print no progress lines on stderr (they are printed only to a terminal: "
                             "never when stderr is piped or redirected)")


def add_verbose(parser: argparse.ArgumentParser) -> None:
    """-v/--verbose: more detail on stderr, torch-fl's own log (FL_LOG's loggers) at INFO, -vv at DEBUG."""
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more detail on stderr: torch-fl's log at INFO (-v) or DEBUG (-vv), as FL_LOG=INFO "
                             "or FL_LOG=DEBUG would set it")


def add_report_files(parser: argparse.ArgumentParser, *, html: bool = True,
                     schema: str | None = "torchfl docs analysis") -> None:
    """--json [FILE] (the machine-readable result, add_json) and, with `html`, --html FILE (a self-contained
    page)."""
    add_json(parser, schema=schema)
    if html:
        parser.add_argument("--html", metavar="FILE", help="write a self-contained HTML report to FILE")


# argparse types shared by the commands: a bad number is a usage error (rc 2) naming the option.
# ASCII digits only: int() and float() also take '١٠', '1_0', ' 2 ' and '1e3'.
_WHOLE = r"[0-9]{1,12}"
_DECIMAL = r"([0-9]{1,12}(\.[0-9]{0,12})?|\.[0-9]{1,12})"
MAX_COUNT = 10**6  # lines, ranks, steps: more is a typo, and some of them are processes or allocations
MAX_SECONDS = 7 * 24 * 3600.0


def positive_int(text: str) -> int:
    """A whole number from 1 to MAX_COUNT, in ASCII digits."""
    import re

    value = int(text) if re.fullmatch(_WHOLE, text) else 0
    if not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got '{text}' (at most {MAX_COUNT}, in "
                                         "ASCII digits)")
    return value


def non_negative_int(text: str) -> int:
    """A whole number from 0 to MAX_COUNT, in ASCII digits (warm-up steps, retries)."""
    if text == "0":
        return 0
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got '{text}' (at most {MAX_COUNT}, in "
                                         "ASCII digits)") from None


def count_up_to(maximum: int):
    """An argparse type: a whole number from 1 to `maximum` (e.g. ranks, each one a process)."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got '{text}' (at most {maximum})")
        return value

    parse.__name__ = "count"  # argparse names the type in its messages
    return parse


def positive_seconds(text: str) -> float:
    """A number of seconds > 0 and at most a week, in ASCII digits."""
    import re

    value = float(text) if re.fullmatch(_DECIMAL, text) else -1.0
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got '{text}' (at most "
                                         f"{MAX_SECONDS:g}, in ASCII digits)")
    return value

