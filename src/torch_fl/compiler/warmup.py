"""Warm-up: run representative inputs through torch.fl.compile so that later processes start warm.

Whether a shape hit the cache is read from Inductor's own counters (``fxgraph_cache_hit`` /
``fxgraph_cache_miss`` in ``torch._dynamo.utils.counters["inductor"]``), counted around that shape's
first call: a hit means the compiled code was loaded from the cache entry instead of generated and
compiled. Backends other than Inductor keep no compiled code on disk, so for them there is no hit or
miss to report.
"""

from __future__ import annotations

import copy
import math
import os
import re
import time
from dataclasses import dataclass
from typing import Any

import torch

from ..analysis.model import ModelSpec
from ..errors import TorchFLError
from ..report import Report, Section, Table, progress
from . import cache
from .jit import compile, compile_stats
from .target import description_of

# ASCII digits only (\d takes '٨'), at most 9 per dimension; fullmatch ('$' passes a final newline)
_SHAPE = re.compile(r"[0-9]{1,9}(x[0-9]{1,9})*")
MAX_ELEMENTS = 1 << 31  # an input of 2**31 elements is 8 GB of float32: a typo (8x6400000), not a warm-up
_COUNTERS = (("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
             ("inductor", "fxgraph_cache_bypass"))


@dataclass
class ShapeResult:
    shape: str
    first_s: float  # first call: compilation (or cache load) plus one run
    next_s: float  # a second call at the same shape: the run alone
    compilations: int
    hits: int
    misses: int
    bypasses: int
    cache: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def parse_shapes(texts: list[str], example_inputs: tuple) -> list[tuple[tuple[int, ...], ...]]:
    """'8x64' (one tensor input) or '8x64,8x64' (one shape per tensor input, in order)."""
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    shapes = []
    for text in texts:
        parts = [p.strip() for p in text.split(",")]
        if not all(_SHAPE.fullmatch(p) for p in parts):
            raise TorchFLError(f"--shapes: '{text}' is not a shape like 8x64 (or 8x64,8x64 for several "
                               f"tensor inputs)")
        if len(parts) != len(tensors):
            raise TorchFLError(f"--shapes: '{text}' gives {len(parts)} shape(s), the model takes "
                               f"{len(tensors)} tensor input(s) ({', '.join(_shape(t) for t in tensors)})")
        shape = tuple(tuple(int(d) for d in p.split("x")) for p in parts)
        for part, dims in zip(parts, shape, strict=True):
            elements = math.prod(dims)
            if elements > MAX_ELEMENTS:
                raise TorchFLError(f"--shapes: '{part}' is {elements:,} elements, more than the {MAX_ELEMENTS:,} "
                                   f"a warm-up input may have (8 GB of float32); is a dimension mistyped?")
        shapes.append(shape)
    return shapes


def _shape(t: torch.Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def make_inputs(example_inputs: tuple, shapes: tuple[tuple[int, ...], ...], seed: int = 0) -> tuple:
    """Inputs like the example ones (dtype, device, value range) with new shapes."""
    generator = torch.Generator().manual_seed(seed)
    it = iter(shapes)
    out = []
    for x in example_inputs:
        if not isinstance(x, torch.Tensor):
            out.append(x)
            continue
        shape = next(it)
        if x.dtype == torch.bool:
            new = torch.randint(0, 2, shape, generator=generator).bool()
        elif x.dtype.is_floating_point or x.dtype.is_complex:
            new = torch.randn(shape, generator=generator).to(x.dtype)
        else:  # token ids, class labels: stay inside the example's range (embedding sizes)
            low, high = (int(x.min()), int(x.max()) + 1) if x.numel() else (0, 2)
            new = torch.randint(low, high, shape, generator=generator, dtype=x.dtype)
        out.append(new.to(x.device))
    return tuple(out)


def _counts() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {name: counters[group][name] for group, name in _COUNTERS}


def _verdict(backend: str, compilations: int, delta: dict[str, int]) -> str:
    hits, misses, bypasses = (delta[n] for _, n in _COUNTERS)
    if compilations == 0:
        return "no compilation (graph reused)"
    if backend != "inductor":
        return f"n/a (backend {backend} keeps no compiled code)"
    if bypasses:
        return f"bypass ({bypasses} graph(s) not cacheable)"
    if hits and not misses:
        return "hit"
    if misses and not hits:
        return "miss"
    return f"partial ({hits} hit, {misses} miss)" if hits or misses else "unknown (no cache lookup)"


def warmup(spec: ModelSpec, device: str | None = None, shapes: list[str] | None = None, *,
           train: bool = False) -> Report:
    """Compile `spec` for each shape (the example inputs when none) and report time and cache use."""
    from ..routing.current import use_device

    desc = description_of(device)
    dev = use_device(device)
    section = desc.section("compile")
    model = copy.deepcopy(spec.model).to(dev)
    example = tuple(x.to(dev) if isinstance(x, torch.Tensor) else x for x in spec.inputs)
    example_label = " ".join(_shape(x) for x in example if isinstance(x, torch.Tensor)) + " (example)"
    runs = ([(example_label, example)] if not shapes else
            [(" ".join("x".join(map(str, s)) for s in shape), make_inputs(example, shape))
             for shape in parse_shapes(shapes, example)])
    data: dict[str, Any] = {"model": spec.name, "device": str(device or dev), "description": desc.name,
                            "jit": section["jit"], "backend": section["backend"],
                            "dynamic_shapes": section["dynamic_shapes"], "train": train, "shapes": []}
    report = Report(f"Warm-up of {spec.name} on {data['device']}", data)
    report.summary += [("description", f"{desc.name} (backend {section['backend']}, dynamic_shapes "
                                       f"{section['dynamic_shapes']})"),
                       ("mode", "training step (forward + backward)" if train else "inference")]
    if not section["jit"]:
        report.warnings.append(f"the '{desc.name}' description sets compile.jit = false: nothing is "
                               f"compiled on this device, so there is nothing to warm up")
        return report
    compiled = compile(model, device=device)
    stats = compile_stats(compiled)
    entry = cache.open_entry(desc)
    data["cache_entry"] = str(entry.path)
    data["fingerprint"] = entry.fingerprint.components
    report.summary.append(("cache entry", str(entry.path)))
    progress(f"compile cache entry {entry.path}")
    model.train(train)
    results = []
    for i, (label, inputs) in enumerate(runs, 1):
        progress(f"[{i}/{len(runs)}] {label}: compiling")
        before, compilations = _counts(), stats.compilations
        first = _timed(compiled, inputs, spec, train)
        delta = {k: v - before[k] for k, v in _counts().items()}
        done = stats.compilations - compilations
        result = ShapeResult(label, first, _timed(compiled, inputs, spec, train), done,
                             delta["fxgraph_cache_hit"], delta["fxgraph_cache_miss"],
                             delta["fxgraph_cache_bypass"], _verdict(stats.backend, done, delta))
        progress(f"[{i}/{len(runs)}] {label}: {result.first_s:.2f} s, cache {result.cache}")
        results.append(result)
    data["shapes"] = [r.as_dict() for r in results]
    data["compile_stats"] = stats.as_dict()
    report.summary.append(("compilations", f"{stats.compilations} ({stats.recompilations} recompilations)"))
    report.sections.append(Section("Shapes", tables=[Table(
        ["shape", "first call s", "next call s", "compilations", "cache"],
        [[r.shape, round(r.first_s, 3), round(r.next_s, 4), r.compilations, r.cache] for r in results])]))
    cache.seal(entry)
    cache.record_warmup(entry, [{"model": spec.name, "shape": r.shape, "cache": r.cache,
                                 "first_s": round(r.first_s, 3), "train": train, "pid": os.getpid(),
                                 "at": cache.timestamp()} for r in results])
    return report


def _timed(compiled: Any, inputs: tuple, spec: ModelSpec, train: bool) -> float:
    start = time.perf_counter()
    step(compiled, inputs, spec, train)
    return time.perf_counter() - start


def step(compiled: Any, inputs: tuple, spec: ModelSpec, train: bool) -> Any:
    """One call of the compiled model, as a warm-up makes it (benchmarks/compile_cache.py times the same): with
    `train`, a training step's forward and backward (the spec's loss), else an inference forward without
    autograd. Returns the output."""
    if train:
        output = compiled(*inputs)
        spec.loss(output, inputs).backward()
        return output
    with torch.no_grad():
        return compiled(*inputs)
