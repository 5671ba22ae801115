"""What one rank runs (versions, description, device, collective backend) and the verdict across ranks.

Rank 0 compares every rank's fingerprint and decides the collective backend for the whole job, so that
every rank gets the same answer and the same error text. The rules:

- torch and torch-fl versions must be equal on every rank (pickled objects, collective op schemas and
  route tables differ between versions);
- ranks of one device kind (device type + vendor) must use the same description (name and file hash),
  the same vendor plugin version and the same collective backend;
- the backend is the description's ``[collectives] backend``. Ranks of different vendors cannot share a
  vendor library (nccl does not talk to hccl), so a job that spans vendors uses ``flagcx`` when FlagCX is
  installed on every rank, and fails now when it is not. A rank on the host CPU among accelerator ranks is
  reported as a rank that lost its accelerator, which is the usual cause;
- an explicit ``backend=`` is used as given, but it must be the same on every rank.

Tests simulate a different torch-fl version on one rank by assigning ``torch_fl._version.__version__`` in
that rank's process before ``init_process_group``: `collect` reads it at call time for that reason.
"""

from __future__ import annotations

import importlib.util
import platform
import socket
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .. import _version
from ..description.model import Description
from ..plugins import plugin_version

Fingerprint = dict[str, Any]

# Field -> label in messages. Versions must match everywhere; the rest within one device kind.
EVERYWHERE = {"torch": "torch version", "torch_fl": "torch-fl version"}
PER_KIND = {"description": "device description", "plugin": "vendor plugin", "backend": "collective backend"}
HOST = "cpu"


@dataclass(frozen=True)
class Verdict:
    """Rank 0's decision: the backend every rank initialises, or the error every rank raises."""

    backend: str
    error: str = ""
    missing: tuple[int, ...] | list[int] = ()  # ranks that never arrived (the error says so)


def collect(device: torch.device, desc: Description, backend: str, *, explicit: bool,
            local_rank: int) -> Fingerprint:
    """This rank's fingerprint (JSON-ready)."""
    version = plugin_version(desc) if desc.plugin else ""
    return {
        "host": socket.gethostname(),
        "local_rank": local_rank,
        "device": str(device),
        "device_type": device.type,
        "vendor": desc.vendor,
        "torch": torch.__version__,
        "torch_fl": _version.__version__,
        "python": platform.python_version(),
        "plugin": f"{desc.plugin} {version or 'version unknown'}" if desc.plugin else "-",
        "description": f"{desc.name}@{desc.sha256[:12]}",
        "description_path": desc.path,
        "backend": backend,
        "explicit_backend": explicit,
        "flagcx": importlib.util.find_spec("flagcx") is not None,
    }


def ranks_text(ranks: Sequence[int]) -> str:
    """[1] -> 'rank 1'; [0, 1, 2, 5] -> 'ranks 0-2, 5' (a 1024-rank list stays one short line)."""
    ranks = sorted(ranks)
    spans: list[str] = []
    start = prev = ranks[0] if ranks else 0
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(spans)


def _shown(field: str, fp: Fingerprint) -> str:
    if field == "description":
        return f"{fp['description']} ({fp['description_path']})"
    return str(fp[field])


def _differences(prints: Sequence[Fingerprint], ranks: Sequence[int], field: str,
                 label: str) -> tuple[str, set[int]] | None:
    """One message line for a field whose value differs among `ranks`, and the ranks off the majority
    (ties go to the value of the lowest rank, so with two ranks rank 0 is the reference)."""
    by_value: dict[str, list[int]] = {}
    for r in ranks:
        by_value.setdefault(_shown(field, prints[r]), []).append(r)
    if len(by_value) < 2:
        return None
    counts = Counter({value: len(members) for value, members in by_value.items()})
    reference = max(by_value, key=lambda v: (counts[v], -min(by_value[v])))
    parts = "; ".join(f"{value} on {ranks_text(members)}" for value, members in by_value.items())
    odd = {r for value, members in by_value.items() if value != reference for r in members}
    return f"  - {label}: {parts}", odd


def decide(prints: Sequence[Fingerprint]) -> Verdict:
    """Compare every rank's fingerprint (index = rank) and choose the backend."""
    everyone = range(len(prints))
    lines: list[str] = []
    odd: set[int] = set()
    fields = dict(EVERYWHERE)
    if any(fp["explicit_backend"] for fp in prints):
        fields["backend"] = "collective backend (backend= argument)"
    for field, label in fields.items():
        found = _differences(prints, everyone, field, label)
        if found:
            lines.append(found[0])
            odd |= found[1]
    kinds = _kinds(prints)
    per_kind = {f: label for f, label in PER_KIND.items() if f not in fields}
    for members in kinds.values():
        for field, label in per_kind.items():
            found = _differences(prints, members, field, label)
            if found:
                lines.append(found[0])
                odd |= found[1]
    if lines:
        return Verdict("", _mismatch_message(lines, odd))
    if prints[0]["explicit_backend"] or len(kinds) == 1:
        return Verdict(prints[0]["backend"])
    return _across_vendors(prints, kinds)


def _kinds(prints: Sequence[Fingerprint]) -> dict[tuple[str, str], list[int]]:
    kinds: dict[tuple[str, str], list[int]] = {}
    for r, fp in enumerate(prints):
        kinds.setdefault((fp["device_type"], fp["vendor"]), []).append(r)
    return kinds


def _mismatch_message(lines: list[str], odd: set[int]) -> str:
    return ("the ranks do not run the same setup, which would surface later as a hang or wrong "
            "results:\n" + "\n".join(lines) + f"\nDiffering from the others: {ranks_text(sorted(odd))}. "
            "Install the same torch, torch-fl and plugin versions and the same description files on "
            "every node ('torchfl doctor' on a node shows what it has), or set FL_PREFLIGHT=0 to skip "
            "this check.")


def _kind_text(prints: Sequence[Fingerprint], members: list[int]) -> str:
    fp = prints[members[0]]
    return f"{fp['vendor']} {fp['device_type']} with {fp['backend']} on {ranks_text(members)}"


def _across_vendors(prints: Sequence[Fingerprint], kinds: dict[tuple[str, str], list[int]]) -> Verdict:
    listing = "; ".join(_kind_text(prints, members) for members in kinds.values())
    on_host = [r for (device_type, _), members in kinds.items() if device_type == HOST for r in members]
    if on_host:
        verb = "runs" if len(on_host) == 1 else "run"
        return Verdict("", f"{ranks_text(on_host)} {verb} on the host CPU while the others use an "
                           f"accelerator ({listing}): the accelerator of those ranks was not found. "
                           "Run 'torchfl doctor' on their node and check the visible-devices variable "
                           "of the description (CUDA_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES, ...).")
    missing = [r for r, fp in enumerate(prints) if not fp["flagcx"]]
    if not missing:
        return Verdict("flagcx")
    return Verdict("", f"the ranks span vendors ({listing}) and no vendor library connects them. "
                       "FlagCX does (backend 'flagcx'), but it is not installed on "
                       f"{ranks_text(missing)}: install it on every rank, or run each vendor's ranks "
                       "as a separate job.")
