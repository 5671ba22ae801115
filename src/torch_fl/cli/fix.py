"""`torchfl fix`: rewrite CUDA-coupled code to the torch.fl API (the fixable findings of `torchfl scan`).

Exit status: 0 nothing left to do (files written, or --diff found nothing to change); 1 --diff found
changes, or a file could not be parsed, read or written; 2 usage error or libcst missing.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..report import Report, plural
from .args import add_json, command_parser
from .exits import CommandError


def _codes(text: str) -> list[str]:
    return [c.strip().upper() for c in text.split(",") if c.strip()]


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text)
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories to fix")
    parser.add_argument("--diff", action="store_true",
                        help="print a unified diff of the changes and write nothing")
    parser.add_argument("--unsafe-fixes", action="store_true", dest="unsafe",
                        help="also apply fixes that can change behaviour on a machine the code already ran "
                             "on (FL105 device variables, FL902 CUDA checks, torch.cuda.device_count / "
                             "manual_seed / get_device_name); safe fixes never do")
    parser.add_argument("--select", type=_codes, action="append", metavar="CODES",
                        help="only these rule codes or prefixes, comma-separated (e.g. FL1,FL202)")
    parser.add_argument("--ignore", type=_codes, action="append", metavar="CODES",
                        help="skip these rule codes or prefixes, comma-separated")
    add_json(parser, what="what was fixed (or, with --diff, would be: per file, with the diff)")


def run(args: argparse.Namespace) -> int:
    import os

    from ..migrate.fix import have_libcst

    if not have_libcst():
        raise ModuleNotFoundError("libcst", name="libcst")  # every command's missing dependency (cli/exits)
    missing = [p for p in args.paths if not os.path.lexists(p)]
    if missing:
        raise CommandError(f"no such file or directory: {', '.join(missing)}")

    from ..migrate.fix import fix_paths
    from ..migrate.scan import ScanConfigError
    from .file_progress import FileProgress
    from .output import emit

    # --select/--ignore may repeat; each takes a comma-separated list.
    select = [c for group in args.select for c in group] if args.select else None
    ignore = [c for group in args.ignore for c in group] if args.ignore else None
    done = 0

    def count(entry: object) -> None:
        nonlocal done
        done += 1
        shown(done, None)

    try:
        with FileProgress("fixing") as shown:
            result = fix_paths(args.paths, unsafe=args.unsafe, diff=args.diff, select=select, ignore=ignore,
                               on_file=count)
    except ScanConfigError as exc:
        raise CommandError(str(exc)) from exc
    emit(build_report(result, args.diff), json_path=args.json)
    if args.diff:
        return 1 if result.changed_files or result.errors else 0
    return 1 if result.errors else 0


def build_report(result: Any, diff: bool) -> Report:
    """The run as a report: its text form is the summary line (with --diff, the diff; the summary goes to
    stderr with the other messages), its data what --json gives."""
    messages = [f"{path}: skipped: {reason}" for path, reason in result.skipped]
    messages += [f"{entry.path}: {entry.error}" for entry in result.errors]
    messages += [f"{entry.path}:{line}: {code}: fix not applied (this form of the code is not rewritten; fix by "
                 f"hand)" for entry in result.files for code, line in entry.not_applied]
    unsafe_note = ""
    if result.skipped_unsafe:
        unsafe_note = (f" ({plural(result.skipped_unsafe, 'unsafe fix', 'unsafe fixes')} not applied; use "
                       f"--unsafe-fixes)")
    what = f"{plural(result.applied, 'finding')} in {plural(len(result.changed_files), 'file')}{unsafe_note}"
    data = {"diff": diff, "applied": result.applied, "changed_files": [str(f.path) for f in result.changed_files],
            "skipped_unsafe": result.skipped_unsafe,
            "files": [{"path": str(f.path), "changed": f.changed, "applied": f.applied,
                       "skipped_unsafe": f.skipped_unsafe, "not_applied": f.not_applied, "error": f.error}
                      for f in result.files],
            "skipped": [{"path": str(path), "reason": reason} for path, reason in result.skipped]}
    if diff:
        data["unified_diff"] = result.diff
        return Report("torchfl fix --diff", data, text=result.diff, messages=[*messages, f"Would fix {what}"])
    return Report("torchfl fix", data, text=f"Fixed {what}\n", messages=messages)
