"""What a command prints and writes: the report's text on stdout, and the --json / --html outputs it asked
for. ``--json FILE`` writes the JSON to FILE next to the text; ``--json`` alone (or ``--json -``) prints the
JSON on stdout instead of the text, in every command (cli/args.add_json).

The report model (Report, Section, Table, Chart) and its text rendering are torch_fl.report; the HTML
page is torch_fl.analysis.html.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any

from ..report import Report, end_progress, progress, render_text, write_json
from .args import STDOUT

__all__ = ["emit", "emit_json", "emit_model_run"]


def emit(report: Report, *, json_path: str | None = None, html_path: str | None = None,
         stream: IO[str] | None = None) -> None:
    """Print the report (its text, or its JSON for ``--json -``) and write the requested files."""
    stream = stream or sys.stdout
    end_progress()  # the running stage's status line shares the terminal with the report
    if json_path == STDOUT:
        emit_json(report.data, STDOUT, stream=stream)
    else:
        stream.write(render_text(report))
        if json_path:
            write_json(report, json_path)
            progress(f"wrote {json_path}")
    if html_path:
        from ..analysis.html import write_html

        write_html(report, html_path)
        progress(f"wrote {html_path}")


def emit_json(data: Any, target: str, *, stream: IO[str] | None = None) -> None:
    """`data` as indented JSON on stdout (`target` ``-``) or in the file `target`."""
    text = json.dumps(data, indent=2) + "\n"
    if target == STDOUT:
        out = stream or sys.stdout
        out.write(text)
        out.flush()
    else:
        Path(target).write_text(text, encoding="utf-8")


def emit_model_run(prog: str, args: Any, measure: Any) -> int:
    """The run of a command that times MODEL's steps with routing active (bench, profile): load the entry
    point, `measure(spec)` builds the report, emit it (0). The routed run stops at the first op the device
    cannot run: that op is named without a traceback, the --json file gets the error, exit status 1."""
    from ..analysis.model import load_model
    from ..errors import UnsupportedOperatorError

    progress(f"loading {args.model}")
    spec = load_model(args.model)
    try:
        report = measure(spec)
    except UnsupportedOperatorError as exc:
        end_progress()
        print(f"{prog}: {args.device} cannot run {spec.name} with routing active:\n{exc}", file=sys.stderr)
        if args.json:
            emit_json({"device": args.device, "model": spec.name, "steps": args.steps, "error": str(exc)},
                      args.json)
        return 1
    emit(report, json_path=args.json, html_path=args.html)
    return 0
