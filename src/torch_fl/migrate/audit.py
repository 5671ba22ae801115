"""The dynamic device audit: run a model or a script on the CPU under the CUDA alias and list every
device request with the source line that made it.

A *device request* is a call that carried a device argument (a factory's ``device=``, ``Tensor.to``,
``Module.to``, ``torch.device(...)``, autocast's device type, ...), a ``.cuda()``, a ``torch.cuda.*``
call, a ``"nccl"`` backend or a CUDA ``map_location``. Requests made by user code are listed whatever the
device; requests made inside torch are listed only when they ask for CUDA (a CPU tensor allocated by
the optimizer is not the user's business). CUDA requests are flagged: each is a line to port (see
``torchfl scan`` / ``torchfl fix``) or one the alias has to keep covering.

The static scanner finds what the code says; the audit finds what it does: device strings built at run
time, CUDA calls in libraries, requests on paths the scanner cannot follow.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..report import Report, Section, Table
from .alias import DeviceRequest, cuda_alias, suspended

# The audit runs where every machine can: on the host, whatever FL_DEVICE says.
AUDIT_DEVICE = "cpu"


class Audit:
    """Counts device requests per (site, call, requested, resolved); a CudaAlias recorder."""

    def __init__(self) -> None:
        self.counts: collections.Counter[DeviceRequest] = collections.Counter()
        self.answers: collections.Counter[tuple[str, str]] = collections.Counter()

    def __call__(self, request: DeviceRequest) -> None:
        self.counts[request] += 1

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Run a block under the CUDA alias (on the CPU) with this audit recording."""
        with suspended(), cuda_alias(AUDIT_DEVICE, recorder=self) as alias:
            try:
                yield
            finally:
                self.answers.update(alias.answers)

    def rows(self) -> list[dict[str, Any]]:
        ordered = sorted(self.counts.items(), key=lambda item: (item[0].site.filename, item[0].site.lineno,
                                                                 item[0].call, item[0].requested))
        return [{"site": str(r.site), "file": r.site.filename, "line": r.site.lineno, "source": r.site.source,
                 "call": r.call, "requested": r.requested, "resolved": r.resolved, "count": count,
                 "cuda": r.cuda} for r, count in ordered]


def audit_model(entry: str, *, train: bool = False) -> tuple[Report, BaseException | None]:
    """Load `entry` (path.py:factory) and run a forward pass (and backward with `train`) under the audit.

    Returns the report and the exception that stopped the run, if any (the requests before it are
    in the report)."""
    from ..analysis.model import ModelSpecError, load_model

    audit = Audit()
    error: BaseException | None = None
    with audit.recording():
        try:
            spec = load_model(entry)
            output = spec.model(*spec.inputs)
            if train:
                spec.loss(output).backward()
        except ModelSpecError:
            raise  # not a run that stopped: an entry point that does not load (no report to give)
        except Exception as exc:
            error = exc
    what = "forward and backward" if train else "forward"
    return build_report(audit, target=entry, mode="model", detail=what, error=error), error


def audit_script(run: Callable[[], int], target: str) -> tuple[Report, int]:
    """Run a script (`run` returns its exit code) under the audit."""
    audit = Audit()
    with audit.recording():
        code = run()
    report = build_report(audit, target=target, mode="script", detail=f"exit code {code}")
    report.data["exit_code"] = code
    return report, code


def _tail(site: str, width: int = 50) -> str:
    """A long path loses its head, not the file name and line (the table cuts cells at their end)."""
    return site if len(site) <= width else "…" + site[-(width - 1):]


def build_report(audit: Audit, *, target: str, mode: str, detail: str,
                 error: BaseException | None = None) -> Report:
    rows = audit.rows()
    cuda = [r for r in rows if r["cuda"]]
    other = [r for r in rows if not r["cuda"]]
    summary = {
        "requests": sum(r["count"] for r in rows), "sites": len({r["site"] for r in rows}),
        "cuda_requests": sum(r["count"] for r in cuda), "cuda_sites": len({r["site"] for r in cuda}),
    }
    data = {"kind": "audit", "target": target, "mode": mode, "run": detail, "device": AUDIT_DEVICE,
            "summary": summary, "requests": rows}
    report = Report(
        title=f"torchfl audit: {target}", data=data,
        summary=[("ran", f"{mode} ({detail}) on {AUDIT_DEVICE}, CUDA aliased"),
                 ("device requests", f"{summary['requests']} at {summary['sites']} site(s)"),
                 ("CUDA requests", f"{summary['cuda_requests']} at {summary['cuda_sites']} site(s)")])
    columns = ["site", "call", "requested", "resolved", "count", "source"]

    def table(selected: list[dict[str, Any]]) -> Table:
        return Table(columns, [[_tail(r["site"]), *(r[c] for c in columns[1:])] for r in selected])

    cuda_section = Section("CUDA requests (each ran on the CPU through the alias)")
    if cuda:
        cuda_section.tables.append(table(cuda))
    else:
        cuda_section.text.append("none: this run asked for no CUDA device")
    report.sections.append(cuda_section)
    if other:
        report.sections.append(Section("Other device requests made by the code", tables=[table(other)]))
    answers = [{"query": query, "answer": answer, "count": count}
               for (query, answer), count in sorted(audit.answers.items())]
    data["answered"] = answers
    if answers:
        report.sections.append(Section(
            "Answered by the alias from the description (on a real chip these come from its runtime)",
            tables=[Table(["query", "answer", "count"], [[a["query"], a["answer"], a["count"]] for a in answers])]))
    if error is not None:
        data["error"] = f"{type(error).__name__}: {error}"
        report.warnings.append(f"the run stopped with {type(error).__name__}: {error} "
                               f"(requests up to that point are listed)")
    not_aliased = sorted({r["call"] for r in cuda if r["resolved"] == "not aliased"})
    if not_aliased:
        report.warnings.append(f"no torch.fl counterpart, ran as is: {', '.join(not_aliased)}")
    return report
