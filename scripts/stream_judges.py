#!/usr/bin/env python
"""Public stream-using code, run unmodified on emulated chips under the stream sanitizer (issue 38 item 3).

The code is read from the fetched mirrors of its repositories (``/work/.mirror/OWNER+NAME/repo``, a git
directory; ``--mirror`` names another root) at run time and never copied into this project: the classes
named below are cut out of their files with ``ast`` (the module around them needs packages this venv does
not have, e.g. timm's ``timm.data`` imports torchvision) and executed as written, with the module-level
names they use supplied. A judge whose mirror is absent is skipped and says so.

Judges (each in a fresh process: the emulated chip is fixed per process, as ``FL_DEVICE`` is):

- timm's ``PrefetchLoader`` (huggingface/pytorch-image-models, timm/data/loader.py): copies the next batch
  on a side stream with ``non_blocking=True``, normalizes it there, and makes the current stream
  ``wait_stream`` the side stream; no ``record_stream``. Under ``emu:npu`` (its ``torch.npu`` branch) and
  ``emu:cuda`` with the CUDA alias (its ``torch.cuda`` branch).
- NVIDIA apex's ``data_prefetcher`` (NVIDIA/apex, examples/imagenet/main_amp.py): the same with
  ``record_stream`` of the batch on the current stream; ``torch.cuda`` only, so ``emu:cuda`` with the alias.
- PyTorch's own ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` and ``DistributedDataParallel`` with
  its own ``fp16_compress_hook`` communication hook (one rank, the emulator's process group), both from the
  installed torch, unmodified.

Each runs a small conv net's training loop (forward, cross entropy, backward, SGD) two ways: ``item``
reads the loss with ``loss.item()`` after every step, as timm's train.py does (a host synchronisation);
``async`` reads nothing, as apex's main_amp.py between its print intervals. Then the same code with one
synchronisation deleted (its line replaced by ``pass``) must be reported.

    python scripts/stream_judges.py                 # every judge, the table of docs/streams.md (~2 min)
    python scripts/stream_judges.py --json judges.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MIRROR = Path("/work/.mirror")

# (judge, repository, file, top-level names to cut out, module-level names it needs from other files)
SOURCES: dict[str, tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...]]] = {
    "timm PrefetchLoader": ("huggingface/pytorch-image-models", "timm/data/loader.py",
                            ("adapt_to_chs", "PrefetchLoader"), (("timm/data/constants.py", ""),)),
    "apex data_prefetcher": ("NVIDIA/apex", "examples/imagenet/main_amp.py", ("data_prefetcher",), ()),
}

# what deleting one synchronisation means in each (a regular expression of the line replaced by `pass`)
DELETIONS: dict[str, dict[str, str]] = {
    "timm PrefetchLoader": {"wait_stream": r"\.wait_stream\("},
    "apex data_prefetcher": {"wait_stream": r"\.wait_stream\(", "record_stream": r"\.record_stream\("},
}

# (judge, chip, extra environment)
RUNS: list[tuple[str, str, dict[str, str]]] = [
    ("timm PrefetchLoader", "emu:npu", {}),
    ("timm PrefetchLoader", "emu:cuda", {"FL_CUDA_ALIAS": "1"}),
    ("apex data_prefetcher", "emu:cuda", {"FL_CUDA_ALIAS": "1"}),
    ("save_on_cpu(pin_memory=True)", "emu:npu", {}),
    ("save_on_cpu(pin_memory=True)", "emu:mlu", {}),
    ("save_on_cpu(pin_memory=True)", "emu:cuda", {"FL_CUDA_ALIAS": "1"}),
    ("DDP + fp16_compress_hook", "emu:npu", {}),
    ("DDP + fp16_compress_hook", "emu:mlu", {}),
]


def git_dir(repo: str, mirror: Path) -> Path:
    return mirror / repo.replace("/", "+") / "repo"


def _show(git: Path, path: str) -> tuple[str, str]:
    commit = subprocess.run(["git", f"--git-dir={git}", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    text = subprocess.run(["git", f"--git-dir={git}", "show", f"HEAD:{path}"], capture_output=True, text=True,
                          check=True).stdout
    return commit, text


def cut(text: str, names: tuple[str, ...]) -> str:
    """The source of the named top-level functions and classes, as written, in file order."""
    tree = ast.parse(text)
    found = {node.name: ast.get_source_segment(text, node) for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names}
    missing = [n for n in names if n not in found]
    if missing:
        raise LookupError(f"{', '.join(missing)} not found: the fetched file changed; update SOURCES")
    return "\n\n".join(found[n] for n in names if n in found)  # type: ignore[misc]


def delete_sync(code: str, pattern: str) -> str:
    """Replace every line matching pattern by `pass` (its indentation kept), and say if none matched."""
    lines, hits = [], 0
    for line in code.splitlines():
        if re.search(pattern, line):
            lines.append(line[: len(line) - len(line.lstrip())] + "pass  # (deleted by stream_judges.py)")
            hits += 1
        else:
            lines.append(line)
    if not hits:
        raise LookupError(f"no line matches {pattern!r}: the fetched code changed")
    return "\n".join(lines)


def load(judge: str, mirror: Path) -> tuple[str, str] | None:
    """(commit, code) of a judge read from its mirror; None when the mirror is absent."""
    repo, path, names, extra = SOURCES[judge]
    git = git_dir(repo, mirror)
    if not git.exists():
        return None
    commit, text = _show(git, path)
    parts = [_show(git, other)[1] if not wanted else cut(_show(git, other)[1], tuple(wanted.split(",")))
             for other, wanted in extra]
    return commit, "\n\n".join([*parts, cut(text, names)])


# the child: one judge, one variant, on this process's emulated chip -------------------------------------
def _model(torch: Any, device: Any) -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, 10)).to(device)


def _loader(torch: Any) -> Any:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (24, 3, 16, 16), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 10, (24,), generator=generator)
    data = torch.utils.data.TensorDataset(images, labels)
    return torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)


def _train(torch: Any, model: Any, batches: Any, loop: str) -> int:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    steps = 0
    for input, target in batches:
        loss = torch.nn.functional.cross_entropy(model(input.float()), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loop == "item":
            loss.item()  # (timm's train.py: losses_m.update(loss.item() * accum_steps, ...))
        steps += 1
    return steps


def child(judge: str, deleted: str, loop: str, mirror: Path) -> dict[str, Any]:
    import torch

    import torch_fl

    device = torch.fl.device()
    check = torch_fl.sanitize(raise_errors=False)  # (FL_SANITIZE=streams turned it on; collect every report)
    model = _model(torch, device)
    if judge.startswith("save_on_cpu"):
        w = torch.randn(16, 16, device=device, requires_grad=True)
        for _ in range(3):
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                loss = model(torch.randn(4, 3, 16, 16, device=device)).sum() + (w.sin() @ w).sum()
            loss.backward()
            if loop == "item":
                loss.item()
        steps = 3
    elif judge.startswith("DDP"):
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

        dist.init_process_group(torch.fl.dist_backend(), store=dist.HashStore(), rank=0, world_size=1)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(None, fp16_compress_hook)
        batches = ((x.to(device), y.to(device)) for x, y in _loader(torch))
        steps = _train(torch, ddp, batches, loop)
        dist.destroy_process_group()
    else:
        _, code = load(judge, mirror)  # type: ignore[misc]
        if deleted != "none":
            code = delete_sync(code, DELETIONS[judge][deleted])
        space: dict[str, Any] = {"__name__": "fetched"}
        exec(compile("import torch\nfrom contextlib import suppress\nfrom functools import partial\n"
                     "from typing import Optional, Tuple\nRandomErasing = FastCollateMixup = None\n",
                     "<judge imports>", "exec"), space)
        exec(compile(code, f"<{judge}>", "exec"), space)
        if judge == "timm PrefetchLoader":
            where = torch.device("cuda") if os.environ.get("FL_CUDA_ALIAS") == "1" else device
            batches = iter(space["PrefetchLoader"](_loader(torch), device=where))
        else:
            prefetcher = space["data_prefetcher"](_loader(torch))

            def apex_batches() -> Any:  # (main_amp.py's loop: input, target = prefetcher.next() until None)
                input, target = prefetcher.next()
                while input is not None:
                    yield input, target
                    input, target = prefetcher.next()

            batches = apex_batches()
        steps = _train(torch, model, batches, loop)
    torch.fl.synchronize()
    check.close()
    kinds = sorted({r.splitlines()[0].removeprefix("torch-fl stream sanitizer: ") for r in check.reports})
    return {"steps": steps, "reports": len(check.reports), "kinds": kinds,
            "first": check.reports[0] if check.reports else ""}


def run(judge: str, chip: str, env: dict[str, str], deleted: str, loop: str, mirror: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--one", judge, deleted, loop, "--mirror", str(mirror)]
    environment = {**os.environ, "FL_DEVICE": chip, "FL_SANITIZE": "streams", "OMP_NUM_THREADS": "1", **env}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr[-1500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, default=MIRROR, help="the root of the fetched mirrors")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(child(*args.one, args.mirror)))
        return 0
    rows = []
    print("| code | commit | chip | sync deleted | loop | steps | reports |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for judge, chip, env in RUNS:
        commit = "torch " + __import__("torch").__version__
        if judge in SOURCES:
            loaded = load(judge, args.mirror)
            if loaded is None:
                print(f"| {judge} | skipped: no mirror at {git_dir(SOURCES[judge][0], args.mirror)} | {chip} |||||")
                continue
            commit = loaded[0]
        label = chip + (" (CUDA alias)" if env.get("FL_CUDA_ALIAS") else "")
        for deleted in ("none", *DELETIONS.get(judge, {})):
            for loop in ("item", "async"):
                found = run(judge, chip, env, deleted, loop, args.mirror)
                rows.append({"judge": judge, "commit": commit, "chip": label, "deleted": deleted, "loop": loop,
                             **found})
                if "error" in found:
                    result = "error: " + found["error"].strip().splitlines()[-1][:120]
                    steps = "-"
                else:
                    result = str(found["reports"]) + (f" ({'; '.join(found['kinds'])})" if found["kinds"] else "")
                    steps = str(found["steps"])
                print(f"| {judge} | {commit} | {label} | {deleted} | {loop} | {steps} | {result} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
