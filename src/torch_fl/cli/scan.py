"""`torchfl scan`: find CUDA-coupled code and say how to make it portable.

Output formats: ``text`` (``path:line:col: FL101 [*] message``, ruff-style, ``[*]`` marking what
``torchfl fix`` rewrites), ``json`` (a list of objects) and ``sarif`` (SARIF 2.1.0 for code-scanning
dashboards, rendered by migrate/scan/sarif.py). ``--json [FILE]`` is every command's
(cli/args.add_json): the JSON list in FILE next to the report, or alone the same as ``--format json``.
Exit status: 0 nothing found, 1 findings or unscannable files, 2 usage error. The rules are documented
in docs/migrate-rules.md.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

from ..report import plural
from .args import STDOUT, add_json, command_parser
from .exits import CommandError, UsageError
from .file_progress import FileProgress

NO_FINDINGS, FINDINGS = 0, 1  # and 2, every command's usage error or bad input (cli/exits)
DOCS = "docs/migrate-rules.md"  # also migrate/scan/sarif.py's, where the SARIF log links to it


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text, values={"docs": DOCS})
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories to scan")
    parser.add_argument("--format", choices=("text", "json", "sarif"),
                        help="output format (default: text; json is also --json)")
    parser.add_argument("--select", action="append", metavar="CODES",
                        help="only these rules: codes or prefixes, comma-separated (FL1,FL203); "
                             "replaces the pyproject.toml selection")
    parser.add_argument("--ignore", action="append", metavar="CODES",
                        help="skip these rules: codes or prefixes, comma-separated")
    parser.add_argument("--statistics", action="store_true",
                        help="print the number of findings per rule instead of each finding")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    parser.add_argument("--unsafe-fixes", action="store_true",
                        help="count findings with an unsafe fix as fixable ([*])")
    add_json(parser, what="the findings (the --format json list; with --statistics, the counts)")


def _codes(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [code.strip() for value in values for code in value.split(",") if code.strip()]


def run(args: argparse.Namespace) -> int:
    import os

    from ..migrate.scan import ScanConfigError, scan_paths
    from ..migrate.scan.sarif import sarif
    from ..report import Report
    from .output import emit

    missing = [p for p in args.paths if not os.path.lexists(p)]
    if missing:
        raise CommandError(f"no such file or directory: {', '.join(missing)}")
    json_file = args.json if args.json not in (None, STDOUT) else None
    if args.json == STDOUT:
        if args.format not in (None, "json"):
            raise UsageError(f"--json alone prints the JSON, and --format {args.format} asks for {args.format}: "
                             f"give one of them, or --json FILE to write the JSON beside the report")
        args.format = "json"
    args.format = args.format or "text"
    for option, path in (("--json", json_file), ("--output", args.output)):
        if path is not None and _is_scanned(path, args.paths):
            raise CommandError(f"{option} {path} is a file being scanned; writing the report there would "
                               f"overwrite it: choose another path (e.g. torchfl-scan.json)")
    if args.statistics and args.format == "sarif":
        raise UsageError("--statistics works with --format text or json")
    try:
        with FileProgress("scanning") as shown:
            result = scan_paths(args.paths, _codes(args.select), _codes(args.ignore),
                                unsafe_fixes=args.unsafe_fixes,
                                on_file=lambda so_far, total: shown(so_far.files, total))
    except ScanConfigError as exc:
        raise CommandError(str(exc)) from exc
    data = statistics(result) if args.statistics else _items(result)
    if args.format == "sarif":
        rendered = json.dumps(sarif(result), indent=2) + "\n"
    elif args.format == "json":
        rendered = json.dumps(data, indent=2) + "\n"
    else:
        rendered = text(result, args.statistics, args.unsafe_fixes)
    # the text form is the chosen format's (compiler-style lines, the JSON list, SARIF); --json FILE the list
    report = Report("torchfl scan", data, text=rendered,
                    messages=[f"{path}: skipped: {reason}" for path, reason in result.skipped])
    emit(report, json_path=json_file, output=args.output)
    if args.exit_zero or not (result.findings or result.errors):
        return NO_FINDINGS
    return FINDINGS


def _is_scanned(output: str, paths: list[str]) -> bool:
    """Whether writing `output` would overwrite a source file this scan reads (a path given to scan, or a
    Python or CUDA file under one). A config file in the tree may be the report of an earlier run
    (`--json findings.json`, run again)."""
    import os

    from ..migrate.configfiles import CONFIG_SUFFIXES
    from ..migrate.scan import ScanConfigError, targets

    if not os.path.lexists(output):
        return False
    output = os.path.realpath(output)
    if any(os.path.realpath(p) == output for p in paths):
        return True
    try:
        return any(os.path.realpath(path) == output for path, _ in targets(paths)
                   if path.suffix not in CONFIG_SUFFIXES)
    except ScanConfigError:
        return False  # reported when the scan starts


def _items(result: Any) -> list[dict[str, Any]]:
    from ..migrate.scan import findings_json

    return findings_json(result)


# Text ---------------------------------------------------------------------------------------------
def summary(result: Any, unsafe_fixes: bool = False) -> str:
    """The last line of the text report."""
    lines = []
    findings = result.findings
    if findings:
        fixable = sum(f.fixable for f in findings)
        hidden = 0 if unsafe_fixes else sum(f.safety == "unsafe" for f in findings)
        command = "`torchfl fix --unsafe-fixes`" if unsafe_fixes else "`torchfl fix`"
        more = f"; {hidden} more, marked [u], with `torchfl fix --unsafe-fixes`" if hidden else ""
        lines.append(f"Found {plural(len(findings), 'finding')} ({fixable} fixable with {command}{more}).")
    elif not result.errors:
        lines.append(f"All checks passed: {plural(result.files, 'file')}, "
                     f"{plural(result.lines, 'line')} scanned.")
    else:  # not "All checks passed": the checks did not run on every file
        rest = max(result.files - len({e.path for e in result.errors}), 0)
        lines.append(f"No findings in the other {plural(rest, 'file')}, but not every file was checked."
                     if rest else "Nothing was checked.")
    if result.errors:
        lines.append(f"{plural(len(result.errors), 'file')} could not be scanned (E999/E902 above).")
    return "\n".join(lines)


def text(result: Any, statistics_only: bool = False, unsafe_fixes: bool = False) -> str:
    out = []
    if statistics_only:
        for row in statistics(result):
            marker = "[*]" if row["fixable"] else "[ ]"
            out.append(f"{row['count']:>5}\t{row['code']}\t{marker} {row['name']}")
    else:
        marks = {(f.path, f.line, f.col, f.code): f.marker for f in result.findings}
        for item in _items(result):
            marker = marks.get((item["path"], item["line"], item["col"], item["code"]), "")
            marker = f"{marker} " if marker else ""
            out.append(f"{item['path']}:{item['line']}:{item['col']}: {item['code']} {marker}{item['message']}")
    out.append(summary(result, unsafe_fixes))
    return "\n".join(out) + "\n"


def statistics(result: Any) -> list[dict[str, Any]]:
    """Findings (and unscannable files) per code, most frequent first."""
    counts = Counter(item["code"] for item in _items(result))
    names = {item["code"]: item["name"] for item in _items(result)}
    fixable = {f.code for f in result.findings if f.safety is not None}  # has a fix, as in JSON and SARIF
    return [{"code": code, "name": names[code], "count": count, "fixable": code in fixable}
            for code, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
