"""Device graphs of an emulated chip: ``torch.npu.NPUGraph`` (``MLUGraph``, ``MUSAGraph``), ``graph``,
``graph_pool_handle``, ``make_graphed_callables``.

A device graph records the kernels a region launches once (capture) and launches them again on the same memory
(replay): the static input tensors are refilled between replays, the static outputs are overwritten, and random
ops draw the generator's next numbers each replay (so ``set_rng_state`` before a replay repeats the draws the
region made after the same state eagerly). The emulated device has no kernels to launch: a capture runs the
region's ops as eager code does (so its outputs hold values right away) and records each top-level op with its
argument and result tensors (a ``TorchDispatchMode``); a replay runs the recorded ops again, in order, on the same
tensors, and writes each fresh result into the tensor the capture returned (in-place and view ops update their
tensors themselves). Random ops draw from the device generator at replay time, as on the chip. What a capture
cannot hold on the chip (host synchronizations, ``.item()``) still runs here: the emulator does not police
capture rules.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_ids = itertools.count(1)
_ids_lock = threading.Lock()


def graph_pool_handle() -> tuple[int, int]:
    """A new memory pool id (the device's memory is the host's: the pool is an id for sharing between graphs)."""
    with _ids_lock:
        return (0, next(_ids))


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: DeviceGraph) -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.graph._records.append((func, args, kwargs, out))
        return out


def _writes_itself(func: Any) -> bool:
    """Whether `func`'s results alias its arguments (in-place, out=, views): a re-run updates them itself."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return False
    return any(r.alias_info is not None for r in schema.returns)


class DeviceGraph:
    """A captured region of the emulated device, replayable (the vendor's NPUGraph/MLUGraph/MUSAGraph)."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._records: list[tuple[Any, tuple, dict, Any]] = []
        self._recorder: _Recorder | None = None
        self._pool: tuple[int, int] | None = None
        self._captured = False

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        if self._recorder is not None:
            raise RuntimeError("this graph is capturing already: call capture_end() first")
        self._records.clear()
        self._pool = tuple(pool) if pool is not None else graph_pool_handle()
        self._recorder = _Recorder(self)
        self._recorder.__enter__()

    def capture_end(self) -> None:
        if self._recorder is None:
            raise RuntimeError("capture_end() without capture_begin()")
        self._recorder.__exit__(None, None, None)
        self._recorder = None
        self._captured = True

    def replay(self) -> None:
        if not self._captured:
            raise RuntimeError("replay() of a graph that has not been captured (capture it with "
                               "`with torch.<chip>.graph(g):`)")
        with torch.no_grad():
            for func, args, kwargs, out in self._records:
                fresh = func(*args, **kwargs)
                if _writes_itself(func):
                    continue
                old, _ = tree_flatten(out)
                new, _ = tree_flatten(fresh)
                for target, value in zip(old, new, strict=False):
                    if isinstance(target, torch.Tensor) and isinstance(value, torch.Tensor) and target is not value:
                        target.copy_(value)

    def reset(self) -> None:
        self._records.clear()
        self._captured = False

    def pool(self) -> tuple[int, int]:
        if self._pool is None:
            raise RuntimeError("the graph has no memory pool until it is captured")
        return self._pool

    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, debug_path: str) -> None:
        with open(debug_path, "w", encoding="utf-8") as f:
            for func, *_ in self._records:
                f.write(f"{func}\n")


class graph:  # (the vendor's name: a context manager class, as torch.cuda.graph)
    """``with torch.<chip>.graph(g):`` captures the block into `g`."""

    def __init__(self, graph: DeviceGraph, pool: Any = None, stream: Any = None,
                 capture_error_mode: str = "global") -> None:
        self.graph, self.pool = graph, pool

    def __enter__(self) -> None:
        self.graph.capture_begin(self.pool)

    def __exit__(self, *exc: Any) -> None:
        self.graph.capture_end()


def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool: Any = None) -> Any:
    """The callables, run eagerly: a graphed callable computes what the callable computes (the graph saves the
    chip's launch overhead, which the emulated device does not have); its autograd is the callable's own."""
    return callables


def device_module_calls(chip: str) -> dict[str, Any]:
    """The graph API under the chip's names (NPUGraph on npu)."""
    named = type(f"{chip.upper()}Graph", (DeviceGraph,), {"__module__": __name__})
    return {named.__name__: named, "graph": graph, "graph_pool_handle": graph_pool_handle,
            "make_graphed_callables": make_graphed_callables}
