"""The ``torchfl`` command. One module per command, each with ``add_parser(subparsers)`` (cli/args'
command_parser, which takes the command's help from cli/texts, and shared arguments) and ``run(args) -> int``,
which builds a report and prints it through cli/output.emit; a command's module is imported only when that
command runs. Every command gets -q/-v and the exit status of cli/exits, whatever it returns or raises
(UsageError: its own usage line, then the message)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# The argparse types of the commands' numbers live in .args; `from . import positive_int` keeps working.
from .args import MAX_COUNT as MAX_COUNT
from .args import MAX_SECONDS as MAX_SECONDS
from .args import count_up_to as count_up_to
from .args import non_negative_int as non_negative_int
from .args import positive_int as positive_int
from .args import positive_seconds as positive_seconds

# The exit status of every command: the table in .exits (docs/cli.md, "Exit status").
from .exits import BAD_INPUT, FAILED, INTERRUPTED, MISSING_DEPENDENCY, USAGE, CommandError, UsageError
from .exits import DEPENDENCIES as DEPENDENCIES
from .exits import OK as OK

# command -> (module, one-line help). Listed here so `torchfl --help` needs no command imports.
COMMANDS: dict[str, tuple[str, str]] = {
    "describe": ("describe", "print a device description as TOML, list them, or probe the live device"),
    "doctor": ("doctor", "diagnose this machine's device, plugin and torch-fl setup"),
    "env": ("env", "lock the versions that matter on a node, and check every node against the lock"),
    "bugreport": ("bugreport", "print a ready-to-paste issue report (secrets redacted)"),
    "routes": ("routes", "show every op's route on a device, or diff two route logs"),
    "coverage": ("coverage", "which of a model's ops a device runs natively, and how the rest route"),
    "compare": ("compare", "compare a model's outputs and gradients on a device against a reference"),
    "bench": ("bench", "steps/s with torch-fl routing on vs off, route time, peak memory, leaks"),
    "profile": ("profile", "a model's steps under torch.profiler: time by route, top ops with routes, copies"),
    "ops-bench": ("ops_bench", "native ops timed against their route alternatives: the chip's slow-op list"),
    "grade": ("grade", "L0/L1/L2 level of a model on a device, from measurements"),
    "scan": ("scan", "find CUDA-coupled code, with rule codes and fixes (text, JSON, SARIF)"),
    "fix": ("fix", "rewrite CUDA-coupled code to the torch.fl API (the fixable findings of scan)"),
    "run": ("run", "run an unmodified CUDA-hard-coded script on torch.fl.device() (the CUDA alias)"),
    "audit": ("audit", "run a model or script and report every device request with its source line"),
    "warmup": ("warmup", "fill the compile cache from representative inputs (time and cache hit per shape)"),
    "aot": ("aot", "export and AOT-compile a model into a fingerprinted .pt2 package, or check one"),
    "cache": ("cache", "the fingerprinted compile cache: info, verify, clear"),
    "preflight": ("preflight", "start N local ranks and run the distributed preflight"),
    "docs": ("docs", "where the documentation is: the pages shipped with torch-fl, or one TOPIC's page"),
}

# The documentation page of each command (`torchfl docs TOPIC`; docs/cli.md has every command): the last
# line of its help. The pages ship in the package (the wheel's torch_fl/docs), so the pointer works anywhere.
DOC_PAGES: dict[str, str] = {"coverage": "analysis", "compare": "analysis", "bench": "analysis",
                             "profile": "analysis", "ops-bench": "analysis",
                             "grade": "analysis", "scan": "migrate-rules", "fix": "migrate-fix",
                             "run": "migrate-runtime", "audit": "migrate-runtime", "warmup": "compile",
                             "aot": "compile", "cache": "compile", "preflight": "distributed"}

# Commands with stages that can take more than ~2 s: each prints progress lines on stderr (a terminal
# only; -q/--quiet, which every command takes, turns them off).
PROGRESS = frozenset({"coverage", "compare", "bench", "grade", "audit", "warmup", "aot", "preflight", "profile",
                       "ops-bench"})


# Commands that run without torch (hook and lint environments; the others say "needs torch" there): the
# launcher's list, which gives them the bare package.
from _torch_fl_cli import TORCH_FREE  # noqa: E402


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="torchfl", description="torch-fl: one PyTorch codebase on every accelerator.",
        epilog="Run 'torchfl COMMAND --help' for a command's options, 'torchfl docs' for the documentation "
               "(every command: 'torchfl docs cli').")
    parser.add_argument("--version", action="version", version=f"torch-fl {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error (also with FL_LOG=DEBUG)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        if name == wanted:
            importlib.import_module(f"{__name__}.{module}").add_parser(sub, name, help_text)
            _point_to_docs(sub.choices[name], DOC_PAGES.get(name, "cli"))
            _add_verbosity(sub.choices[name])
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _point_to_docs(parser: argparse.ArgumentParser, topic: str) -> None:
    """End the command's help with its documentation page, unless its epilog names one already."""
    epilog = parser.epilog or ""
    if "torchfl docs" not in epilog:
        line = f"Docs: torchfl docs {topic}" + ("" if topic == "cli" else " (every command: torchfl docs cli)")
        parser.epilog = f"{epilog}\n{line}" if epilog else line


def _add_verbosity(parser: argparse.ArgumentParser) -> None:
    """-q and -v on every command (and every action of `routes`, `cache`), whichever the command declared."""
    from .args import add_quiet, add_verbose

    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if action is not None:
        for child in dict.fromkeys(action.choices.values()):
            _add_verbosity(child)
        return
    if "-q" not in parser._option_string_actions:
        add_quiet(parser)
    if "-v" not in parser._option_string_actions:
        add_verbose(parser)


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)parser of the deepest command `args` chose: `torchfl cache verify` -> verify's."""
    while True:
        action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, action.dest, None) if action is not None else None
        if chosen is None or chosen not in action.choices:
            return parser
        parser = action.choices[chosen]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser(argv)  # imports the wanted command's module (and what it needs)
    except Exception as exc:
        wanted = next((a for a in argv if not a.startswith("-")), "")
        return report_error(f"torchfl {wanted}".strip(), exc, debug="--debug" in argv)
    args, extras = parser.parse_known_args(argv)
    if extras:
        # the command's own usage and name (`torchfl cache verify: error: ...`), not the top level's
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
    if not args.command:
        parser.print_help()
        return USAGE
    if getattr(sys.modules.get("torch_fl"), "__torch_free__", False) and args.command not in TORCH_FREE:
        # the bare package of _torch_fl_cli: torch is not installed; help and --version worked above
        return _needs(f"torchfl {args.command}", "torch")
    if getattr(args, "verbose", 0):
        from .._logging import configure

        configure("INFO" if args.verbose == 1 else "DEBUG")
    quiet, previous = getattr(args, "quiet", False), None
    if quiet:
        from ..report import set_progress

        previous = set_progress(False)
    try:
        module = importlib.import_module(f"{__name__}.{COMMANDS[args.command][0]}")
        return int(module.run(args) or 0)
    except UsageError as exc:  # options that do not go together: the (sub-)command's usage, as argparse's errors
        _end_progress()
        inner = _innermost(parser, args)
        inner.print_usage(sys.stderr)
        print(f"{inner.prog}: error: {exc}", file=sys.stderr)
        return exc.code
    except CommandError as exc:
        _end_progress()
        print(f"{_innermost(parser, args).prog}: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        _end_progress()
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # A reader that stops early (`torchfl describe cuda | head`) is not an error; point stdout at
        # devnull so Python's flush at exit does not report the broken pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        _end_progress()
        return report_error(_innermost(parser, args).prog, exc, debug=args.debug)
    finally:
        _end_progress()
        if quiet:
            sys.modules[_REPORT].set_progress(previous)


_REPORT = __name__.rpartition(".")[0] + ".report"  # torch_fl.report, looked up, not imported


def _end_progress() -> None:
    """Clear the running stage's status line (before a message, and when the command ends)."""
    report = sys.modules.get(_REPORT)
    if report is not None:  # never imported: no stage ran (scan starts without it)
        report.end_progress()


def _needs(prog: str, dependency: str) -> int:
    """A missing dependency, said the same way with the same exit status in every command (.exits)."""
    print(f"{prog}: this command needs {dependency}: {DEPENDENCIES[dependency]}", file=sys.stderr)
    return MISSING_DEPENDENCY


def user_error_text(exc: BaseException) -> str | None:
    """The one-paragraph message of an error the user can fix (bad input, a file that cannot be read),
    or None for anything else (a bug in torch-fl)."""
    from .. import _toml
    from ..errors import TorchFLError

    if isinstance(exc, (TorchFLError, _toml.TextDecodeError)):
        return str(exc)
    if isinstance(exc, _toml.TOMLDecodeError):
        return f"not valid TOML: {exc}"
    if isinstance(exc, UnicodeDecodeError):
        return (f"a file is not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start} is not "
                f"{exc.encoding}. Fix: save it as UTF-8")
    if isinstance(exc, MemoryError):  # an input far larger than anything torch-fl reads
        return ("out of memory. Was an input much larger than expected (a huge or endless file, an "
                "enormous shape or count)? Fix: check the files and numbers given; rerun with --debug to see "
                "where")
    if isinstance(exc, OSError):
        where = ": ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        reason = exc.strerror or str(exc) or type(exc).__name__
        return f"{where}: {reason}" if where else reason
    return None


def is_bad_input(exc: BaseException) -> bool:
    """Whether `exc` says the input was wrong (exit status 2), not that running it failed (1)."""
    from .. import _toml
    from ..errors import (
        ConfigError,
        DescriptionError,
        DeviceNotFoundError,
        ModelSpecError,
        RouteLogError,
        UnknownDescriptionError,
    )

    return isinstance(exc, (ConfigError, DescriptionError, DeviceNotFoundError, ModelSpecError, RouteLogError,
                            UnknownDescriptionError, _toml.TOMLDecodeError, _toml.TextDecodeError,
                            UnicodeDecodeError, FileNotFoundError, IsADirectoryError, NotADirectoryError))


def user_code_location(exc: BaseException) -> str | None:
    """'file.py, line N' when `exc` comes from the user's code (a model or script the command ran), i.e.
    the innermost frame outside Python's and installed libraries is not torch-fl's; else None."""
    import sysconfig
    import traceback

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    libraries = tuple(os.path.abspath(p) for p in {sysconfig.get_paths()[k] for k in ("stdlib", "purelib",
                                                                                        "platlib")})
    if isinstance(exc, SyntaxError) and exc.filename and os.path.isfile(exc.filename):
        frames = [(exc.filename, exc.lineno)]
    else:
        frames = [(f.filename, f.lineno) for f in reversed(traceback.extract_tb(exc.__traceback__))]
    for filename, line in frames:
        path = os.path.abspath(filename)
        if filename.startswith("<") or path.startswith(libraries):
            continue  # torch, the standard library: whoever called them decides
        return None if path.startswith(package + os.sep) else f"{filename}, line {line}"
    return None


def report_error(prog: str, exc: BaseException, *, debug: bool = False) -> int:
    """Print `exc` as one message: the traceback only with --debug or FL_LOG=DEBUG, and for an error that
    is not the user's, a pointer to `torchfl bugreport`. Returns the exit status (.exits): 2 for bad input
    (`is_bad_input`) and a missing dependency, else 1."""
    import traceback

    from .exits import missing_dependency

    dependency = missing_dependency(exc)
    if dependency is not None:  # torch or libcst is not installed (a hook or lint environment): not a bug
        return _needs(prog, dependency)
    from .._logging import debugging

    if debug or debugging():
        traceback.print_exception(exc)
    text = user_error_text(exc)
    if text is not None:
        print(f"{prog}: error: {text}", file=sys.stderr)
        return BAD_INPUT if is_bad_input(exc) else FAILED
    where = user_code_location(exc)
    if where is not None:  # the user's model or script raised: their bug, not ours
        print(f"{prog}: error in your code ({where}): {type(exc).__name__}: {exc}\n"
              f"Rerun with 'torchfl --debug ...' for the full traceback.", file=sys.stderr)
        return FAILED
    print(f"{prog}: internal error: {type(exc).__name__}: {exc}\n"
          f"This is a bug in torch-fl, not in your input. Please report it: rerun with 'torchfl --debug ...' "
          f"for the traceback, and attach the output of 'torchfl bugreport'.", file=sys.stderr)
    return FAILED
