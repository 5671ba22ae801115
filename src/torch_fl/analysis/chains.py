"""The router's decisions replayed inside a trace: every call gets the route the runtime would give it,
and a translated call expands into the calls its translation makes, recursively.

Coverage must not pass a model that then stops on the chip. A translation is PyTorch code that calls
other aten ops (``empty_like`` becomes ``empty_permuted``; ``_safe_softmax`` calls ``all``, ``sum`` and
``rsub``), and the chip must run those too. So a translated call is not a leaf: the trace runs the same
translation function the router runs (torch_fl.routing.translate.translation) on the same (fake or real)
tensors, with the recording mode re-entered, exactly as the emulator re-enters its own checks, and each
sub-call is classified with its own route (RouteTable.route, the router's table) and remembers the chain
of translated ops it was reached through. The rest mirrors torch_fl.routing.router.Router:

- factory calls (no tensor argument): a placeholder of no elements is native whatever its dtype, and
  a tensor of a dtype outside ``precision.dtypes`` fails at its creation (RouteTable.creation);
- native: the op runs; an output dtype outside ``precision.dtypes`` is unsupported (rfft on a chip
  without complex64), as the emulator checks;
- translate: counted as translate, then the translation runs; when there is none, it keeps calling
  the op itself, or it returns NotImplemented, RouteTable.untranslatable decides (fallback or error);
- fallback: counted; unsupported when ``FL_FALLBACK=error`` or when the CPU has no kernel for the op
  either (routing/reference.py host_can_run: fused attention; _thnn_fused_lstm_cell runs from its
  reference math);
- kernel: counted, then the registered kernel runs on the trace's tensors with the mode re-entered, as
  its calls on the device are routed too (a kernel that cannot run on them is a leaf);
- unsupported: counted, and the op still runs on the trace's tensors so the rest of the model is
  reported too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from .. import _env
from .._names import RouteKind
from ..routing.reference import host_can_run
from ..routing.table import Route, RouteTable, foreign_output_dtype, placeholder
from ..routing.translate import guard, translation, untranslatable_reason

# A translated call a sub-call was reached through: (op, dtype).
Link = tuple[str, str | None]
# A call as recorded: (op, dtype, module, chain of translated calls outermost first, route kind, source);
# the kind is None in a trace without a route table.
CallKey = tuple[str, str | None, str, tuple[Link, ...], RouteKind | None, str]


_PLACEHOLDER = Route(RouteKind.NATIVE, "a placeholder of no elements: no device needs a kernel or a dtype for it")


class Replay:
    """Routes calls for a recording dispatch mode the way the router would, and counts them."""

    def __init__(self, table: RouteTable):
        self.table = table
        self.dtypes = frozenset(table.description.dtypes)
        self.strict_fallback = _env.FL_FALLBACK.value() == "error"
        self.calls: Counter[CallKey] = Counter()
        # Bytes a CPU fallback copies per recorded call key: its device inputs to the host and its results
        # back (what cpu_fallback moves), from the traced tensors' shapes and dtypes.
        self.copied: Counter[CallKey] = Counter()
        self.via: list[Link] = []
        self._cpu: dict[str, bool] = {}

    def call(self, mode: Any, func: Any, op: str, dtype: str | None, module: str,
             args: tuple, kwargs: dict) -> Any:
        """Run one call that reached `mode` (already popped, as inside ``__torch_dispatch__``)."""
        if _factory(args, kwargs):
            created = _PLACEHOLDER if placeholder(func, args) else self.table.creation(op, dtype)
            if created is not None:
                out = func(*args, **kwargs)
                self._count(op, dtype, module, created)
                return out
        route = self.table.route(op, dtype)
        kind = route.kind
        if kind is RouteKind.TRANSLATE:
            return self._translate(mode, func, op, dtype, module, route, args, kwargs)
        if kind is RouteKind.KERNEL and route.kernel is not None and not guard.in_kernel[op]:
            return self._kernel(mode, func, op, dtype, module, route, args, kwargs)
        if kind is RouteKind.FALLBACK:
            route = self._fallback(op, route)
        out = func(*args, **kwargs)
        if kind is RouteKind.NATIVE:
            produced = foreign_output_dtype(func, out, self.dtypes)
            if produced is not None:
                route = Route(RouteKind.UNSUPPORTED, f"{route.source}; it produces {produced}, which is not in "
                                             f"precision.dtypes")
        self._count(op, dtype, module, route, args, kwargs, out)
        return out

    def _fallback(self, op: str, route: Route) -> Route:
        if self.strict_fallback:
            return Route(RouteKind.UNSUPPORTED, f"{route.source}; FL_FALLBACK=error forbids running it on the CPU")
        if not _cpu_can_run(op, self._cpu):
            return Route(RouteKind.UNSUPPORTED, f"{route.source}; but the CPU has no kernel for it either")
        return route

    def _count(self, op: str, dtype: str | None, module: str, route: Route, args: tuple = (),
               kwargs: dict | None = None, out: Any = None) -> None:
        key = (op, dtype, module, tuple(self.via), route.kind, route.source)
        self.calls[key] += 1
        if route.kind is RouteKind.FALLBACK:
            self.copied[key] += copied_bytes((*args, *(kwargs or {}).values()), out)

    def _translate(self, mode: Any, func: Any, op: str, dtype: str | None, module: str, route: Route,
                   args: tuple, kwargs: dict) -> Any:
        reason = untranslatable_reason(op)
        if reason is not None:
            return self._untranslatable(func, op, dtype, module, route, args, kwargs, reason)
        fn = translation(op)
        self._count(op, dtype, module, route)  # the router counts the call before translating it
        guard.depth[op] += 1
        self.via.append((op, dtype))
        try:
            with mode:  # the translation's own calls are recorded and routed too
                out = fn(*args, **kwargs)
        finally:
            self.via.pop()
            guard.depth[op] -= 1
        if out is NotImplemented:
            return self._untranslatable(func, op, dtype, module, route, args, kwargs,
                                        "its decomposition does not cover these inputs")
        return out

    def _kernel(self, mode: Any, func: Any, op: str, dtype: str | None, module: str, route: Route,
                args: tuple, kwargs: dict) -> Any:
        """A registered kernel runs on the device's tensors, so the ops it calls are routed as well
        (the kernel calling its own op gets the native kernel, as in the router). A kernel that cannot
        run on the trace's tensors (a Triton kernel on fake ones) is a leaf: the op's own semantics
        give the shapes to go on with."""
        self._count(op, dtype, module, route)
        outer, self.calls = self.calls, Counter()
        guard.in_kernel[op] += 1
        self.via.append((op, dtype))
        try:
            with mode:
                out = route.kernel(*args, **kwargs)
        except Exception:
            out = None
        finally:
            self.via.pop()
            guard.in_kernel[op] -= 1
            inner, self.calls = self.calls, outer
        if out is None:
            return func(*args, **kwargs)
        self.calls.update(inner)
        return out

    def _untranslatable(self, func: Any, op: str, dtype: str | None, module: str, route: Route,
                        args: tuple, kwargs: dict, why: str) -> Any:
        instead = self.table.untranslatable(route, why)
        if instead.kind is RouteKind.FALLBACK:
            instead = self._fallback(op, instead)
        out = func(*args, **kwargs)
        self._count(op, dtype, module, instead, args, kwargs, out)
        return out


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def copied_bytes(inputs: tuple, out: Any) -> int:
    """Bytes one CPU fallback copies (router.cpu_fallback): every device tensor among `inputs` to the
    host, then every tensor of `out` back (a written argument, in-place self or out=, is copied back into
    the original; a new result moves to the device). Host tensors among the inputs (0-dim scalars, host
    indices) are not copied; in a trace with every tensor on the host all of them count."""
    given = _tensors(inputs)
    going = [t for t in given if t.device.type != "cpu"] or given
    return sum(t.numel() * t.element_size() for t in (*going, *_tensors(out)))


def _cpu_can_run(op: str, cache: dict[str, bool]) -> bool:
    found = cache.get(op)
    if found is None:
        found = cache[op] = host_can_run(op)
    return found


def _factory(args: tuple, kwargs: dict) -> bool:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) or (isinstance(value, (list, tuple)) and value
                                               and isinstance(value[0], torch.Tensor)):
            return False
    return True


__all__ = ["CallKey", "Link", "Replay"]
