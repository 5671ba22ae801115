"""What a command prints and writes, the one output path of every command: it builds a Report and `emit`
prints the report's text on stdout (or into ``-o FILE``), its messages on stderr, and writes the --json /
--html outputs it asked for. ``--json FILE`` writes the JSON to FILE next to the text; ``--json`` alone (or
``--json -``) prints the JSON on stdout instead of the text, in every command (cli/args.add_json). A file
that cannot be written is bad input (exit status 2, cli/exits), said in one line.

The report model (Report, Section, Table, Chart) and its text rendering are torch_fl.report; the HTML
page is torch_fl.analysis.html.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ..report import Report, end_progress, progress, render_text
from .args import STDOUT
from .exits import BAD_INPUT, CommandError

__all__ = ["check_folder", "emit", "emit_json", "emit_model_run"]


def emit(report: Report, *, json_path: str | None = None, html_path: str | None = None,
         output: str | Path | None = None, stream: IO[str] | None = None) -> None:
    """Print the report's messages on stderr, then the report (its text, or its JSON for ``--json -``) on
    `stream` (stdout) or into the file `output` (``-o FILE``), and write the requested --json / --html files."""
    stream = stream or sys.stdout
    end_progress()  # the running stage's status line shares the terminal with the report
    for message in report.messages:
        print(message, file=sys.stderr)
    # --json alone: the JSON instead of the text, where the text goes (stdout, or -o FILE)
    text = _json(report.data) if json_path == STDOUT else render_text(report)
    if output is not None:
        _write(output, text)
    else:
        stream.write(text)
        stream.flush()  # a broken pipe surfaces here, where the CLI ends it quietly
    if json_path not in (None, STDOUT):
        emit_json(report.data, json_path)
        progress(f"wrote {json_path}")
    if html_path:
        from ..analysis.html import write_html

        try:
            write_html(report, html_path)
        except OSError as exc:
            raise _unwritable(html_path, exc) from exc
        progress(f"wrote {html_path}")


def emit_json(data: Any, target: str, *, stream: IO[str] | None = None) -> None:
    """`data` as indented JSON on stdout (`target` ``-``) or in the file `target`."""
    text = _json(data)
    if target == STDOUT:
        out = stream or sys.stdout
        out.write(text)
        out.flush()
    else:
        _write(target, text)


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, default=str) + "\n"


def _write(path: str | Path, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _unwritable(path, exc) from exc


def _unwritable(path: str | Path, exc: OSError) -> CommandError:
    return CommandError(f"cannot write {path}: {exc.strerror or exc}; choose a path in a folder you can write",
                        BAD_INPUT)


def emit_model_run(prog: str, args: Any, measure: Callable[[Any], Report], *, routing: bool = True,
                   failure: Callable[[Any, str], dict[str, Any]] | None = None,
                   status: Callable[[Report], int] = lambda report: 0) -> int:
    """The run of a command that runs MODEL's steps on a device (bench, profile, ops-bench, compare): load the
    entry point, `measure(spec)` builds the report, emit it; the exit status is `status(report)` (0). The run
    stops at the first op the device cannot run: that op is named without a traceback ("with routing
    active" where `routing`), the --json file gets `failure(spec, error)` (by default the device, the model,
    the steps and the error), exit status 1."""
    from ..analysis.model import load_model
    from ..errors import UnsupportedOperatorError

    progress(f"loading {args.model}")
    spec = load_model(args.model)
    try:
        report = measure(spec)
    except UnsupportedOperatorError as exc:
        end_progress()
        print(f"{prog}: {args.device} cannot run {spec.name}{' with routing active' if routing else ''}:\n{exc}",
              file=sys.stderr)
        if args.json:
            data = (failure(spec, str(exc)) if failure is not None else
                    {"device": args.device, "model": spec.name, "steps": args.steps, "error": str(exc)})
            emit_json(data, args.json)
        return 1
    emit(report, json_path=args.json, html_path=args.html)
    return status(report)


def check_folder(path: str | Path, option: str, shown: str | None = None) -> None:
    """A FILE option's value (`shown` in the message, else "OPTION PATH") is bad input when the folder it names
    does not exist: said before the run, not after minutes of it."""
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise CommandError(f"cannot write {shown or f'{option} {path}'}: the folder {folder} does not exist; create "
                           f"it or pass {option} with a path in an existing folder")
