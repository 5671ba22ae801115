"""`torchfl routes`: the route of every aten overload on a device, and the difference of two route logs.

``routes show`` asks the route table (torch_fl.routing) without activating routing, so it installs
nothing and never writes an FL_ROUTE_LOG. ``routes diff`` compares two route logs (FL_ROUTE_LOG or
torch.fl.write_route_log) and exits like diff(1): 0 identical, 1 different, 2 unreadable input.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._names import ROUTES, RouteKind
from ..report import plural
from .args import add_actions, add_device, add_json, command_parser

if TYPE_CHECKING:  # torch_fl.routing imports torch: `torchfl routes --help` needs none
    from ..routing.stats import RouteLog

SAME, DIFFERENT = 0, 1  # and 2 for a log that cannot be read (cli/exits)


# Parser -------------------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text)
    actions = add_actions(parser)
    _add_show(actions, ROUTES)
    _add_diff(actions)


def _add_show(actions: argparse._SubParsersAction, routes: Sequence[str]) -> None:
    show = actions.add_parser(
        "show", help="the route of every aten overload on a device",
        description="Print a summary (aten overloads per route) and a table of the ops that are not "
                    "native, with the setting that decided each route (FL_ROUTE, a config file, a "
                    "registered kernel, a description list, the native op set, or ops.default).")
    add_device(show, what="device whose routes to show", descriptions=True)
    show.add_argument("--route", choices=routes, help="only ops with this route")
    show.add_argument("--op", metavar="SUBSTRING", help="only ops whose name contains SUBSTRING")
    show.add_argument("--dtype", help="routes for inputs of this dtype, e.g. float16 (default: "
                                      "regardless of dtype)")
    show.add_argument("--all", action="store_true", help="list native ops too")
    add_json(show, what="the routes")


def _add_diff(actions: argparse._SubParsersAction) -> None:
    diff = actions.add_parser(
        "diff", help="compare two route logs (exit 0 identical, 1 different, 2 bad input)",
        description="Compare two route logs written with FL_ROUTE_LOG (for instance before and after "
                    "upgrading torch, the plugin or a description): ops whose route changed, ops "
                    "routed in only one log, and call counts that changed. A log lists only calls that "
                    "were not native, so an op missing from one log ran natively or was not called.",
        epilog="Exit status: 0 when the logs have the same records, 1 when they differ, 2 when a log "
               "cannot be read.")
    diff.add_argument("before", help="route log of the earlier run (JSON)")
    diff.add_argument("after", help="route log of the later run (JSON)")
    diff.add_argument("--ignore-calls", action="store_true",
                      help="ignore changed call counts (only routes matter, e.g. in CI)")
    add_json(diff, what="the changes")


def run(args: argparse.Namespace) -> int:
    return run_show(args) if args.action == "show" else run_diff(args)


# routes show --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """What `--device` named: the label to print, and the description that governs it as
    torch_fl.routing.route_table accepts it (a name, a path or emu:NAME; not a device id)."""

    device: str
    table_name: str
    description: Any  # torch_fl.description.model.Description


def governing(device: str | None) -> Target:
    """The description that governs `device` (see the --device help for the accepted forms)."""
    from ..device import EMULATION_PREFIX, default_device_id, governing, names_description

    text = (device or default_device_id()).strip()
    # governing() activates nothing: showing routes must not install routers or arm an FL_ROUTE_LOG write
    desc = governing(text)
    if text.startswith(EMULATION_PREFIX):
        return Target(text, text, desc)
    if names_description(text):
        return Target(desc.name, text, desc)
    return Target(text, desc.name, desc)


def route_rows(target: Target, dtype: str | None, op_filter: str | None = None) -> list[dict[str, str]]:
    """[{'op', 'route', 'source'}] for every aten overload (containing `op_filter`) on `target`."""
    from ..description.probe import all_aten_ops
    from ..routing import route_table

    table = route_table(target.table_name)
    rows = []
    for op in all_aten_ops():
        if op_filter and op_filter not in op:
            continue
        route = table.route(op, dtype)
        rows.append({"op": op, "route": route.kind, "source": route.source})
    return rows


def check_dtype(name: str | None) -> str | None:
    """'float16' or 'torch.float16' -> 'float16'; anything that is not a torch dtype is an error."""
    import torch

    from ..errors import ConfigError

    if name is None:
        return None
    bare = name.strip().removeprefix("torch.")
    if not isinstance(getattr(torch, bare, None), torch.dtype):
        raise ConfigError(f"--dtype {name!r} is not a torch dtype (examples: float32, float16, "
                          f"bfloat16, int64, bool)")
    return bare


def summary(rows: Iterable[dict[str, str]]) -> dict[str, int]:
    counts = Counter(row["route"] for row in rows)
    return {route: counts.get(route, 0) for route in (*ROUTES, *sorted(set(counts) - set(ROUTES)))}


def run_show(args: argparse.Namespace) -> int:
    from ..report import Report
    from .output import emit

    target = governing(args.device)
    dtype = check_dtype(args.dtype)
    rows = route_rows(target, dtype, args.op)
    listed = [row for row in rows if _listed(row, args.route, args.all)]
    data = {"device": target.device, "description": target.description.name, "dtype": dtype,
            "summary": summary(rows), "ops": listed}
    emit(Report(f"routes on {target.device}", data, text=render_show(target, dtype, rows, listed, args)),
         json_path=args.json)
    return 0


def _listed(row: dict[str, str], route: str | None, everything: bool) -> bool:
    if route is not None:
        return row["route"] == route
    return everything or row["route"] != RouteKind.NATIVE


def render_show(target: Target, dtype: str | None, rows: list[dict[str, str]],
                listed: list[dict[str, str]], args: argparse.Namespace) -> str:
    desc = target.description
    counts = ", ".join(f"{n} {r}" for r, n in summary(rows).items())
    matching = f" containing '{args.op}'" if args.op else ""
    lines = [f"device {target.device}: description '{desc.name}' ({desc.path})",
             f"native ops from: {desc.native_source}",
             f"dtype: {dtype or 'any (routes regardless of dtype)'}",
             f"{len(rows)} aten overloads{matching}: {counts}", ""]
    if not listed:
        what = f"with route {args.route}" if args.route else "" if args.all else "that are not native"
        return "\n".join([*lines, f"no ops {what}".rstrip() + "\n"])
    # The header names the description file once; repeating it on every row hides the part that differs.
    prefix = f"description '{desc.name}' ({desc.path}) "
    table = [(row["op"], row["route"], row["source"].removeprefix(prefix)) for row in listed]
    return "\n".join([*lines, format_table(("op", "route", "source"), table)])


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    from ..report import Table, render_table

    return render_table(Table(list(header), [list(row) for row in rows]), None, rule=False) + "\n"


# routes diff --------------------------------------------------------------------------------------
def run_diff(args: argparse.Namespace) -> int:
    from ..report import Report
    from ..routing.stats import CHANGES, diff_route_logs, read_route_log
    from .output import emit

    # an unreadable log raises RouteLogError: bad input, exit status 2 (cli/exits)
    before, after = read_route_log(args.before), read_route_log(args.after)
    changes = diff_route_logs(before, after, ignore_calls=args.ignore_calls)
    counts = {kind: sum(c["change"] == kind for c in changes) for kind in CHANGES}
    data = {"before": _side(before), "after": _side(after), "identical": not changes, "summary": counts,
            "changes": changes}
    emit(Report("route log diff", data, text=render_diff(before, after, changes, counts)), json_path=args.json)
    return DIFFERENT if changes else SAME


def _side(log: RouteLog) -> dict[str, Any]:
    return {"path": log.path, "device": log.device, "description": log.description, "records": log.records}


def render_diff(before: RouteLog, after: RouteLog, changes: list[dict[str, Any]],
                counts: dict[str, int]) -> str:
    from ..routing.stats import CHANGES

    lines = [f"{label:<7} {log.path}  (device {log.device or '?'}, description {log.description or '?'}, "
             f"{log.records} records)" for label, log in (("before:", before), ("after:", after))]
    if not changes:
        return "\n".join([*lines, "identical"]) + "\n"
    what = {"route": "route changed", "added": "routed only after", "removed": "routed only before",
            "calls": "call count changed"}
    lines.append(f"{plural(len(changes), 'difference')}: "
                 + ", ".join(f"{counts[k]} {what[k]}" for k in CHANGES if counts[k]))
    lines.append("('-': not in that log, i.e. the op ran natively or was not called)\n")
    rows = [(c["change"], c["op"], c["dtype"], _calls(c["before"]), _calls(c["after"])) for c in changes]
    return "\n".join(lines) + "\n" + format_table(("change", "op", "dtype", "before", "after"), rows)


def _calls(routes: dict[str, int]) -> str:
    return ", ".join(f"{route} ({calls} calls)" for route, calls in sorted(routes.items())) or "-"
