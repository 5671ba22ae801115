"""``torchfl preflight``: start N local ranks through torchrun's launcher and run the distributed
preflight in each (torch.fl.distributed.init_process_group), then print one row per rank.

The ranks are real processes started by torch_fl.distributed.launch (torchrun's engine, c10d rendezvous
on a free local port), so they see exactly the environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
agent store) that a training job started with torchrun sees.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from ..report import Report, Section, render_text
from . import count_up_to, positive_seconds
from .args import add_json, command_parser
from .output import emit

MAX_RANKS = 1024  # local ranks are processes on one node

DEFAULT_TIMEOUT = 30.0


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text)
    parser.add_argument("--nproc", type=count_up_to(MAX_RANKS), default=None, metavar="N",
                        help="ranks to start (default: the node's device count, at least 2)")
    parser.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                        help=f"seconds each preflight step may take (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--backend", help="force a torch.distributed backend (default: from the "
                                          "descriptions of the ranks)")
    add_json(parser, what="the per-rank results")


def run(args: argparse.Namespace) -> int:
    from ..report import end_progress, progress

    nproc = args.nproc or _default_nproc()
    began = time.perf_counter()
    progress(f"starting {nproc} ranks and running the preflight in each (each step may take {args.timeout:g} s)")
    results = launch(nproc, args.timeout, args.backend)
    seconds = time.perf_counter() - began
    end_progress()
    emit(build_report(results, nproc, seconds), json_path=args.json)
    return 0 if all("error" not in r for r in results) else 1


def _default_nproc() -> int:
    from ..device import device_map

    return max(2, len(device_map()))


def launch(nproc: int, timeout: float, backend: str | None) -> list[dict[str, Any]]:
    """Run the preflight on `nproc` local ranks; one result per rank ('row' or 'error')."""
    from ..distributed.launch import run_local

    # A rank that died (the watchdog's exit, a crash) returns nothing; the launcher says why. The ranks
    # the launcher then stopped are not failures of their own.
    return [r.value if r.ok else {"rank": r.rank, "error": r.error}
            for r in run_local(_worker, timeout, backend, nproc=nproc, name="torchfl-preflight") if not r.stopped]


def _worker(timeout: float, backend: str | None) -> dict[str, Any]:
    """One rank (runs in a process started by the launcher)."""
    import torch.distributed as dist

    from ..distributed import init_process_group
    from ..errors import TorchFLError

    rank = int(os.environ["RANK"])
    try:
        report = init_process_group(backend, preflight=True, preflight_timeout=timeout)
    except TorchFLError as exc:
        return {"rank": rank, "error": str(exc)}
    except Exception as exc:  # torch's own errors (an unknown backend, a plugin that fails): per rank too
        return {"rank": rank, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert report is not None
    return {"rank": rank, "row": next(row for row in report.rows if row["rank"] == rank)}


def build_report(results: list[dict[str, Any]], nproc: int, seconds: float) -> Report:
    """The per-rank table, the failed ranks and the verdict; the data is what ``--json`` writes."""
    from ..distributed.checks import PreflightReport

    rows = [r["row"] for r in results if "row" in r]
    failed = [r for r in results if "error" in r]
    sections = []
    if rows:
        sections.append(Section("Ranks", tables=[PreflightReport(nproc, rows[0]["backend"], rows).rank_table()]))
    if failed:
        sections.append(Section("Failed ranks", text=[_failure(r["rank"], r["error"]) for r in failed]))
    verdict = "passed" if not failed else f"FAILED on {len(failed)} of {nproc} ranks"
    sections.append(Section("Result", text=[
        f"preflight {verdict}: {nproc} local ranks, {seconds:.1f} s including process start-up"]))
    return Report("torch-fl preflight", {"nproc": nproc, "seconds": seconds, "ranks": results}, sections=sections)


def _failure(rank: int, error: str) -> str:
    return f"rank {rank}: FAILED: {error.removeprefix(f'rank {rank}: ')}"  # torch-fl's errors name the rank


def render(results: list[dict[str, Any]], nproc: int, seconds: float) -> str:
    """`build_report` as text (torch_fl.report.render_text)."""
    return render_text(build_report(results, nproc, seconds))
