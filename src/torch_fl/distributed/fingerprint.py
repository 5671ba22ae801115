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
from dataclasses import dataclass, replace
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
# The backend of a job across vendors without FlagCX (distributed/mixed.py registers it under this name).
MIXED_BACKEND = "flmixed"


@dataclass(frozen=True)
class Verdict:
    """Rank 0's decision: the backend every rank initialises, or the error every rank raises."""

    backend: str
    error: str = ""
    missing: tuple[int, ...] | list[int] = ()  # ranks that never arrived (the error says so)
    plan: str = ""  # a job across vendors: its groups and backends, as rank 0 logs it
    autocast: str = ""  # the autocast dtype every rank uses ('' : each chip keeps its own)


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
        "library": desc.collective_backend,  # the vendor's own library, what it runs inside its kind
        "dtypes": list(desc.dtypes),
        "autocast": desc.autocast_dtype,
        "native_ops": len(desc.native_ops()),  # the op table's size: a job across vendors shows each
        "lock": _lock_facts(),
    }


def _lock_facts() -> dict[str, str]:
    """What `torchfl env lock` records (Python ABI, glibc, libstdc++, drivers, toolkits) that the other
    fields do not already compare (torch, torch-fl, the description in use): ranks of one kind must agree
    on all of it. Optional packages and other chips' descriptions are left out."""
    from ..analysis.envlock import lock_facts

    return {k: v for k, v in lock_facts().items()
            if k not in ("torch", "torch_fl") and not k.startswith(("package.", "description."))}


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
        found_lock = _lock_differences(prints, members)
        lines += found_lock[0]
        odd |= found_lock[1]
    if lines:
        return Verdict("", _mismatch_message(lines, odd))
    if prints[0]["explicit_backend"] or len(kinds) == 1:
        return Verdict(prints[0]["backend"])
    verdict = _across_vendors(prints, kinds)
    if verdict.error:
        return verdict
    autocast, error = _common_autocast(prints, kinds)
    if error:
        return Verdict("", error)
    return replace(verdict, autocast=autocast, plan=_plan(prints, kinds, verdict.backend, autocast))


def _lock_differences(prints: Sequence[Fingerprint], members: list[int]) -> tuple[list[str], set[int]]:
    """The `torchfl env lock` components that differ among ranks of one kind, one line each."""
    locks = [prints[r].get("lock") for r in members]
    if any(lock is None for lock in locks):  # a peer from before the lock existed: versions differ anyway
        return [], set()
    lines: list[str] = []
    odd: set[int] = set()
    for key in sorted({k for lock in locks for k in lock}):
        shown = {r: {"value": prints[r]["lock"].get(key, "(absent)")} for r in members}
        found = _differences(shown, members, "value", f"{key} (torchfl env lock)")
        if found:
            lines.append(found[0])
            odd |= found[1]
    return lines, odd


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
    if all(fp["flagcx"] for fp in prints):
        return Verdict("flagcx")
    return Verdict(MIXED_BACKEND)


# Low-precision dtypes autocast may settle on, preferred first when the chips' own choices differ.
_AUTOCAST = ("bfloat16", "float16")


def _common_autocast(prints: Sequence[Fingerprint], kinds: dict[tuple[str, str], list[int]]) -> tuple[str, str]:
    """(the autocast dtype of every rank, '') or ('', the error naming the chip that has none in common).
    Chips whose own autocast dtypes agree keep it; otherwise the job takes the dtype most of them use
    that every chip computes, so that every rank rounds alike."""
    own = Counter(prints[members[0]].get("autocast", "") for members in kinds.values())
    if len(own) == 1:
        return next(iter(own)), ""
    common = [d for d in _AUTOCAST if all(d in prints[m[0]].get("dtypes", ()) for m in kinds.values())]
    if common:
        return max(common, key=lambda d: (own[d], -_AUTOCAST.index(d))), ""
    lacking = "; ".join(f"{_kind_text(prints, members)} lacks "
                        f"{', '.join(d for d in _AUTOCAST if d not in prints[members[0]].get('dtypes', ()))}"
                        for members in kinds.values()
                        if not all(d in prints[members[0]].get("dtypes", ()) for d in _AUTOCAST))
    return "", ("the chips of this job have no low-precision dtype in common for autocast ("
                f"{lacking}), so their ranks would round differently. Fix: train in float32 on this mix "
                "(no autocast), or run the ranks of each chip as a separate job.")


def _plan(prints: Sequence[Fingerprint], kinds: dict[tuple[str, str], list[int]], backend: str,
          autocast: str) -> str:
    """What a job across vendors runs, for rank 0's log at step 0."""
    leaders = [members[0] for members in kinds.values()]
    lines = [f"this job spans {len(kinds)} kinds of chip; backend '{backend}':"]
    for members in kinds.values():
        fp = prints[members[0]]
        inside = fp.get("library", fp["backend"]) + (" (emulated: gloo on the host data)" if _emulated_print(fp) else "")
        table = f", {fp['native_ops']} native ops" if "native_ops" in fp else ""
        lines.append(f"  - {fp['vendor']} {fp['description'].split('@')[0]} ({fp['device_type']}) on "
                     f"{ranks_text(members)}: {inside} inside{table}, leader rank {members[0]}")
    if backend == "flagcx":
        lines.append("  - between kinds: FlagCX (installed on every rank)")
    else:
        lacking = [r for r, fp in enumerate(prints) if not fp["flagcx"]]
        lines.append(f"  - between kinds: gloo on host copies among the leaders ({ranks_text(leaders)}); "
                     f"FlagCX would replace this, but it is not installed on {ranks_text(lacking)}")
    lines.append("  - an op one chip's table lacks stops that rank at its first use, and the others name it")
    own = {prints[m[0]].get("autocast", "") for m in kinds.values()}
    why = "every chip's own" if len(own) == 1 else f"computed by every chip; their own: {', '.join(sorted(own))}"
    lines.append(f"  - autocast dtype: {autocast} ({why})")
    return "\n".join(lines)


def _emulated_print(fp: Fingerprint) -> bool:
    return "," in fp["backend"]  # an emulated chip's backend string: 'cpu:gloo,npu:npu'


def host_traffic(payload_bytes: int, kinds: int, link_gbps: float = 25.0) -> dict[str, float]:
    """What one all_reduce of `payload_bytes` costs each leader of a flmixed job of `kinds` kinds: a copy
    to the host and back (device link) plus gloo's ring between leaders, 2(K-1)/K of the payload sent
    (and as much received), over a link of `link_gbps` gigabits per second. A model on paper: it ignores
    latency and the vendor step inside each kind."""
    ring = 2 * (kinds - 1) / kinds * payload_bytes if kinds > 1 else 0.0
    return {"device_host_bytes": 2.0 * payload_bytes, "link_bytes": ring,
            "link_seconds": ring * 8 / (link_gbps * 1e9)}
