"""`torchfl fix`: rewrite CUDA-coupled code to the torch.fl API (the fixable findings of `torchfl scan`).

Exit status: 0 nothing left to do (files written, or --diff found nothing to change); 1 --diff found
changes, or a file could not be parsed, read or written; 2 usage error or libcst missing.
"""

from __future__ import annotations

import argparse
import sys

from .args import add_quiet

USAGE = 2


def _codes(text: str) -> list[str]:
    return [c.strip().upper() for c in text.split(",") if c.strip()]


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name, help=help_text,
        description="Rewrite the fixable findings of `torchfl scan` to the torch.fl API: device strings "
                    "to torch.fl.device(), .cuda() to .to(torch.fl.device()), torch.cuda.is_available() to "
                    "torch.fl.is_accelerator(), other torch.cuda.* runtime calls to torch.fl.*, "
                    "torch.cuda.amp to torch.autocast/torch.amp.GradScaler with torch.fl.device_type(), "
                    "'nccl' to torch.fl.dist_backend(). A safe fix keeps behaviour on the host the code "
                    "already ran on, the CPU included. Formatting and comments are kept; `# noqa` is "
                    "respected; files are replaced atomically; read-only files and links out of the tree "
                    "are skipped.",
        epilog="Examples:\n  torchfl fix train.py\n  torchfl fix src/ --diff\n"
               "  torchfl fix src/ --unsafe-fixes --select FL1,FL9\n"
               "Exit status: 0 done (or --diff: nothing to change), 1 --diff found changes or a file was "
               "skipped (syntax error, unreadable, unwritable), 2 usage error or libcst missing.\n"
               "Docs: docs/migrate-fix.md",
        formatter_class=argparse.RawDescriptionHelpFormatter)
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
    add_quiet(parser)


def run(args: argparse.Namespace) -> int:
    import os

    from ..migrate.fix import LIBCST_MISSING, have_libcst

    if not have_libcst():
        print(LIBCST_MISSING, file=sys.stderr)
        return USAGE
    missing = [p for p in args.paths if not os.path.lexists(p)]
    if missing:
        print(f"torchfl fix: error: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return USAGE

    from ..migrate.fix import fix_paths
    from ..migrate.scan import ScanConfigError
    from .file_progress import FileProgress

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
            report = fix_paths(args.paths, unsafe=args.unsafe, diff=args.diff, select=select, ignore=ignore,
                               on_file=count)
    except ScanConfigError as exc:
        print(f"torchfl fix: error: {exc}", file=sys.stderr)
        return USAGE
    for path, reason in report.skipped:
        print(f"{path}: skipped: {reason}", file=sys.stderr)
    for entry in report.errors:
        print(f"{entry.path}: {entry.error}", file=sys.stderr)
    for entry in report.files:
        for code, line in entry.not_applied:
            print(f"{entry.path}:{line}: {code}: fix not applied (this form of the code is not "
                  f"rewritten; fix by hand)", file=sys.stderr)
    unsafe_note = ""
    if report.skipped_unsafe:
        unsafe_note = f" ({_count(report.skipped_unsafe, 'unsafe fix', 'unsafe fixes')} not applied; use --unsafe-fixes)"
    changed = len(report.changed_files)
    what = f"{_count(report.applied, 'finding')} in {_count(changed, 'file')}{unsafe_note}"
    if args.diff:
        sys.stdout.write(report.diff)
        print(f"Would fix {what}", file=sys.stderr)
        return 1 if changed or report.errors else 0
    print(f"Fixed {what}")
    return 1 if report.errors else 0


def _count(n: int, one: str, many: str | None = None) -> str:
    """'1 file', '3 files' (the summary line a person reads; issue 42: "in 1 files")."""
    return f"{n} {one if n == 1 else many or one + 's'}"
