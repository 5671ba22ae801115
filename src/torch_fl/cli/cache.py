"""`torchfl cache info | clear | verify`: the fingerprinted compile cache of a device's description.

Exit status: 0; ``verify`` 1 when the root is refused or an entry is corrupt (an artifact differs from
its recorded sha256) or untrusted (not this user's alone); ``clear`` 1 when an entry in use was
skipped; 2 on a usage error."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ..report import Report, plural
from .args import add_actions, add_device, add_report_files, command_parser
from .output import emit


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text)
    actions = add_actions(parser)
    info = actions.add_parser("info", help="the root, every entry with its size, and the current "
                                           "fingerprint's components")
    verify = actions.add_parser("verify", help="check who owns the root and every entry, every manifest, "
                                               "and the sha256 of every artifact; exit 1 naming what is "
                                               "altered or untrusted")
    clear = actions.add_parser("clear", help="remove this description's entries (--stale: only the "
                                             "stale ones; --all: every entry under the root)")
    which = clear.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every entry under the root, of every description")
    which.add_argument("--stale", action="store_true", help="only entries whose fingerprint is not current")
    which.add_argument("--corrupt", action="store_true", help="only corrupt, untrusted and quarantined "
                                                              "entries and leftovers of interrupted writes")
    clear.add_argument("--force", action="store_true", help="also remove entries a running process uses")
    for action in (info, verify, clear):
        add_device(action, what="whose description's cache")
    for action in (info, verify):
        add_report_files(action, html=False, schema="torchfl docs compile")


def run(args: argparse.Namespace) -> int:
    from ..compiler import cache, trust
    from ..compiler.fingerprint import fingerprint
    from ..compiler.target import description_of

    desc = description_of(args.device)
    root = cache.cache_root(desc)
    broad = trust.broad_root(root)
    refusal = trust.root_refusal(root, cache.root_source(desc)) if broad or root.is_dir() else ""
    # A broad root is not even listed: `info` would walk every file of the home directory (or of /); and
    # nothing under a root another user can write is worth reading or removing as this user.
    if broad or (refusal and args.action != "info"):
        emit(Report(f"torchfl cache {args.action}", {"root": str(root), "refused": refusal},
                    text=f"REFUSED   {refusal}\n"), json_path=getattr(args, "json", None))
        return 1
    current = fingerprint(desc)
    entries = cache.scan(root, full=args.action == "verify")
    if args.action == "clear":
        return _clear(root, entries, current, args)
    data = _data(root, desc, current, entries)
    data["refused"] = refusal
    lines = _info(data) if args.action == "info" else _verify(data)
    emit(Report(f"torchfl cache {args.action}", data, text="\n".join(lines) + "\n"), json_path=args.json)
    return 0 if args.action == "info" else _verdict(data)


def _data(root: Path, desc: Any, current: Any, entries: list) -> dict[str, Any]:

    rows = []
    for e in entries:
        row: dict[str, Any] = {"name": e.name, "status": e.status, "problem": e.problem, "size": e.size,
                               "last_used": e.last_used, "in_use": e.in_use,
                               "current": e.name == current.entry_name, "description": e.description,
                               "altered": e.altered, "artifacts": e.artifacts, "unrecorded": e.unrecorded}
        if e.manifest:
            row["components"] = e.manifest["components"]
            row["created"] = e.manifest.get("created", "")
            row["warmup"] = len(e.manifest.get("warmup", []))
            if not row["current"] and e.description == desc.name:
                row["differs"] = {k: list(v) for k, v in current.diff(e.manifest["components"]).items()}
        rows.append(row)
    from ..compiler.cache import root_source

    return {"root": str(root), "root_source": root_source(desc), "description": desc.name,
            "current": current.entry_name, "components": current.components,
            "current_exists": (root / current.entry_name).is_dir(), "entries": rows}


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def _info(data: dict[str, Any]) -> list[str]:
    from ..compiler.fingerprint import describe_change
    from ..report import Table, render_table

    lines = [f"compile cache root: {data['root']} (from {data['root_source']})"]
    if data["refused"]:
        lines.append(f"REFUSED: {data['refused']}")
    state = "exists" if data["current_exists"] else "not created yet: the next compile creates it"
    lines.append(f"current entry:      {data['current']} ({state})")
    rows = []
    for row in data["entries"]:
        if row["status"] == "leftover":
            note = row["problem"]
        elif row["status"] in ("corrupt", "untrusted"):
            note = f"{row['status'].upper()}: {row['problem']}"
        elif row["status"] in ("quarantined", "shared"):
            note = row["problem"]
        elif row["current"]:
            note = "current"
        elif "differs" in row:
            note = "stale: " + describe_change({k: tuple(v) for k, v in row["differs"].items()})
        else:
            note = f"other description ({row['description']})"
        if row["in_use"]:
            note += " [in use]"
        rows.append([("* " if row["current"] else "  ") + row["name"], _size(row["size"]),
                     _when(row["last_used"]), row.get("warmup", "-"), note])
    lines.append("")
    lines.append(render_table(Table(["entry", "size", "last used", "warm-ups", "note"], rows), max_width=100)
                 if rows else "no entries")
    lines += ["", "current fingerprint components:"]
    width = max(map(len, data["components"]))
    lines += [f"  {name.ljust(width)}  {value}" for name, value in data["components"].items()]
    return lines


def _verdict(data: dict[str, Any]) -> int:
    """verify's exit status: 1 when an entry is corrupt or untrusted."""
    return 1 if any(row["status"] in ("corrupt", "untrusted") for row in data["entries"]) else 0


def _verify(data: dict[str, Any]) -> list[str]:
    lines, corrupt = [], 0
    for row in data["entries"]:
        if row["status"] in ("corrupt", "untrusted"):
            corrupt += 1
            lines.append(f"{row['status'].upper():<9} {row['name']}: {row['problem']}")
            lines += [f"  ALTERED {altered}" for altered in row["altered"]]
        elif row["status"] == "quarantined":
            lines.append(f"quarantine {row['name']}: {row['problem']} (`torchfl cache clear --corrupt` removes it)")
        elif row["status"] == "shared":
            lines.append(f"shared    {row['name']}: {row['problem']}")
        elif row["status"] == "leftover":
            lines.append(f"leftover  {row['name']}: {row['problem']} (harmless; removed by the next writer or "
                         f"`torchfl cache clear --corrupt`)")
        else:
            state = "current" if row["current"] else "stale" if "differs" in row else "other description"
            extra = f"; {row['problem']}" if row["problem"] else ""
            unrecorded = (f", {row['unrecorded']} not recorded yet (a compile in progress or killed)"
                          if row["unrecorded"] else "")
            lines.append(f"ok        {row['name']}: manifest valid, fingerprint re-hashes to its name, "
                         f"{plural(row['artifacts'], 'artifact')} "
                         f"{'matches its' if row['artifacts'] == 1 else 'match their'} sha256{unrecorded} ({state}{extra})")
    entries = sum(1 for r in data["entries"] if r["status"] not in ("leftover", "quarantined", "shared"))
    lines.append(f"{plural(entries, 'entry', 'entries')} under {data['root']}: {corrupt} corrupt or untrusted")
    if corrupt:
        lines.append("remove them with `torchfl cache clear --corrupt` (the current entry is moved aside and "
                     "rebuilt automatically at its next use)")
    return lines


def _clear(root: Path, entries: list, current: Any, args: argparse.Namespace) -> int:
    from ..compiler import cache

    if args.all:
        names = [e.name for e in entries]
    elif args.corrupt:
        names = [e.name for e in entries if e.status in ("corrupt", "untrusted", "quarantined", "leftover")]
    else:
        mine = [e for e in entries if e.status == "ok" and e.description == current.description]
        names = [e.name for e in mine if not (args.stale and e.name == current.entry_name)]
    if not names:
        emit(Report("torchfl cache clear", {"root": str(root), "removed": [], "skipped": [], "kept": []},
                    text=f"nothing to remove under {root}\n"))
        return 0
    foreign: list[str] = []
    removed, skipped = cache.remove(root, names, force=args.force, foreign=foreign)
    messages = [f"skipped {root / name}: a running process uses it (--force removes it anyway)" for name in skipped]
    messages += [f"kept    {root / name}: torch-fl did not create it (no {cache.MARKER} marker, no valid manifest); "
                 f"remove it yourself if it is not yours to keep" for name in foreign]
    data = {"root": str(root), "removed": removed, "skipped": skipped, "kept": foreign}
    emit(Report("torchfl cache clear", data, text="".join(f"removed {root / name}\n" for name in removed),
                messages=messages))
    return 1 if skipped else 0
