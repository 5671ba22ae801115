"""`torchfl describe`: print a description as TOML, list descriptions, or probe the live device."""

from __future__ import annotations

import argparse
import copy
import sys

from .args import add_device, add_json, command_parser
from .exits import UsageError


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text)
    parser.add_argument("name", nargs="?", help="description name or path (default: the one in use)")
    parser.add_argument("--list", action="store_true", help="list every known description and its file")
    parser.add_argument("--probe", action="store_true",
                        help="probe the live device: native op list and dtypes from the dispatcher")
    add_device(parser, what="device to probe")
    parser.add_argument("--as", dest="rename", metavar="NAME",
                        help="rename the copy (its `name` key): a new chip's description, which loads next to "
                             "the original instead of replacing it")
    parser.add_argument("-o", "--output", help="write to this file instead of stdout")
    add_json(parser, what="the description's data (with --list, the list)")


def _list() -> str:
    from ..description import registry
    from ..report import Table, render_table

    rows = [(d.name, d.vendor, d.device_type, d.dispatch_key, "built-in" if d.builtin else d.path)
            for d in sorted(registry.descriptions().values(), key=lambda d: d.name)]
    header = ["name", "vendor", "device_type", "dispatch_key", "source"]
    return render_table(Table(header, [list(row) for row in rows]), None, rule=False) + "\n"


def _shadowed() -> list[str]:
    from ..analysis.doctor import shadowing_warning
    from ..description import registry

    return [f"torchfl describe: warning: {shadowing_warning(name, f'{path} ({origin})')}"
            for name, (path, origin) in registry.shadowed().items()]


def probed_description(device: str | None = None):
    """A description of the live device: the governing description with the dispatcher's native op
    set and the dtypes the device accepts."""
    from ..description.loader import parse
    from ..description.probe import probe_dtypes, probe_native_ops
    from ..device import description_for
    from ..routing.current import use_device

    dev = use_device(device)
    base = description_for(dev)
    data = copy.deepcopy(base.data)
    data["ops"]["native"] = sorted(probe_native_ops(base.dispatch_key))
    data["precision"]["dtypes"] = probe_dtypes(str(dev))
    if data["precision"]["autocast_dtype"] not in data["precision"]["dtypes"]:
        data["precision"]["autocast_dtype"] = "float32" if "float32" in data["precision"]["dtypes"] \
            else data["precision"]["dtypes"][0]
    data["summary"] = f"Probed from the live device {dev} (base: {base.name})"
    from .. import _toml

    return parse(_toml.dumps(data), f"<probe of {dev}>")


def renamed(desc, name: str):
    """A copy of `desc` named `name`, saying what it was copied from (the loader checks the name)."""
    from .. import _toml
    from ..description import registry
    from ..description.loader import parse

    data = copy.deepcopy(desc.data)
    data["name"] = name
    data["summary"] = f"Copy of '{desc.name}' to edit into the description of {name}"
    # below the original: two descriptions of one device type may not share a detect.priority
    taken = {d.section("detect")["priority"] for d in registry.descriptions().values()
             if d.device_type == desc.device_type and d.name != name}
    priority = data["detect"]["priority"]
    while priority >= 0 and priority in taken:
        priority -= 1
    data["detect"]["priority"] = priority
    return parse(_toml.dumps(data), f"<copy of {desc.name} as {name}>")


def _same_name_note(desc) -> str:
    """A header line for a copy that keeps a built-in's name: loading it replaces that built-in."""
    from ..description import registry

    builtin = registry.descriptions().get(desc.name)
    if builtin is None or not builtin.builtin:
        return ""
    return (f"# name = '{desc.name}': loaded as is, this file REPLACES the built-in '{desc.name}' (describe --list "
            f"and doctor warn). For a new chip: torchfl describe {desc.name} --as NEWNAME\n")


def run(args: argparse.Namespace) -> int:
    import torch_fl

    from ..report import Report
    from .output import emit

    if args.list:
        if args.rename:
            raise UsageError("--as renames a copy of one description; it does not go with --list")
        from ..description import registry

        known = sorted(registry.descriptions().values(), key=lambda d: d.name)
        data = [{"name": d.name, "vendor": d.vendor, "device_type": d.device_type, "dispatch_key": d.dispatch_key,
                 "source": "built-in" if d.builtin else str(d.path)} for d in known]
        report = Report("descriptions", data, text=_list(), messages=_shadowed())
    else:
        desc = probed_description(args.device) if args.probe else torch_fl.description(args.name)
        if args.rename:
            desc = renamed(desc, args.rename)
        report = Report(f"description {desc.name}", desc.data, text=_same_name_note(desc) + desc.to_toml())
    emit(report, json_path=args.json, output=args.output)
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
