"""Install routers on the physical dispatch key, only for ops whose route is not plain native.

Native ops are never touched, so a model whose ops are all native pays nothing:

- Ops with no kernel on the key (the usual non-native case) reach ONE backend fallback that torch-fl
  registers for the key, when the key has none yet (a vendor plugin may own one: then per-op kernels).
  Measured on torch 2.13: ~190 per-op Python kernels on the CPU key made every *unrelated* native op
  ~0.7 us slower (gelu on a 16x16 tensor: 5.6 -> 6.3 us); one fallback costs nothing measurable.
- Ops that have a kernel but are routed anyway (FL_ROUTE, config, explicit lists, dtype limits) get a
  per-op torch.library kernel registered with ``with_keyset=True``; it keeps the op's original kernel
  (``torch.library.get_kernel``) for the dtypes that stay native.

Destroying the Libraries restores the dispatcher exactly.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch

from .._names import RouteKind
from .._opnames import canonical_op_name, dispatcher_op_name
from .._versions import release
from ..description.probe import has_native_kernel
from ..errors import TorchVersionError
from .router import Router, first_dtype
from .translate import is_composite_implicit, overload

# (read on every call: a module global is ~4x faster to read than an Enum member)
NATIVE_KIND = RouteKind.NATIVE

_log = logging.getLogger("torch_fl.dispatch")
GET_KERNEL_SINCE = "2.9"  # torch.library.get_kernel (pytorch/pytorch#158393)


def _original_kernel(op: str, key: str, needed: bool) -> Any:
    """The op's own kernel on `key` (None when it has none). `needed`: the router must be able to call
    it (a dtype that stays native, or a fallback on the CPU key, which runs the CPU kernel)."""
    name = dispatcher_op_name(op)
    if not has_native_kernel(name, key):
        return None
    if hasattr(torch.library, "get_kernel"):
        return torch.library.get_kernel(name, key)
    if not needed:
        return None  # every call is routed away from the native kernel: nothing to keep
    raise TorchVersionError(
        f"routing {op}, which has a native {key} kernel, by dtype or by override needs torch >= "
        f"{GET_KERNEL_SINCE} (torch.library.get_kernel); installed: {torch.__version__}. Upgrade torch, "
        f"or check the chip with emulation (FL_DEVICE=emu:NAME), which works on older torch.")


def _make_router(router: Router, op: str, ovl: torch._ops.OpOverload, orig: Any):
    table = router.table
    routes: dict[str | None, Any] = {}
    call_boxed = orig.call_boxed if orig is not None else None

    def route_call(keyset, *args, **kwargs):
        dtype = first_dtype(args, kwargs)
        route = routes.get(dtype)
        if route is None:
            route = routes[dtype] = table.route(op, dtype)
        if route.kind is NATIVE_KIND and call_boxed is not None:
            return call_boxed(keyset, *args, **kwargs)
        native = None if call_boxed is None else (lambda a, k: call_boxed(keyset, *a, **k))
        return router.call(op, ovl, route, dtype, args, kwargs, native)

    return route_call


class KeyInstallation:
    """Routers for one description on its dispatch key; `remove()` restores the dispatcher.

    Each op with a kernel of its own gets a Library of its own, so that a kernel registered or removed
    later (`refresh_op`) re-installs that op alone (torch._library's handles work the same way) instead
    of the whole key: ~1 ms, not the ~20 ms of removing and installing every router."""

    def __init__(self, router: Router):
        self.router = router
        self.key = router.table.description.dispatch_key
        self.libraries: dict[str, torch.library.Library] = {}  # per routed op with a kernel of its own
        self.fallback: torch.library.Library | None = None  # the key's backend fallback, when ours
        self._ops: list[str] | None = None          # every routed op (None: not listed yet, see `ops`)
        self._kernelless: set[str] | None = None    # the routed ops served by the backend fallback
        self._routes: dict[Any, tuple[str, dict[str | None, Any]]] = {}
        self._free_fallback = False

    def install(self) -> KeyInstallation:
        # Library.fallback is newer than our torch floor; older torch gets per-op kernels throughout.
        self._free_fallback = hasattr(torch.library.Library, "fallback") and \
            not torch._C._dispatch_has_backend_fallback(getattr(torch._C.DispatchKey, self.key))
        table = self.router.table
        # With the key's fallback ours, an op without a kernel on the key reaches it by itself: only ops
        # that have a kernel need a router of their own, and where the native set is the key's own probe
        # the settings name them all (named_ops: a few ops, not a pass over ~3,100 that took ~40 ms of
        # the first torch.fl.device()). The kernelless ones are listed when asked (`kernelless`).
        named = table.named_ops() if self._free_fallback else None
        try:
            with warnings.catch_warnings():
                # torch warns once that a kernel overrides an existing one: that is the point here.
                warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
                if named is None:
                    self._ops, self._kernelless = [], set()
                for op in table.routed_ops() if named is None else named:
                    self._register(op)
            if self._free_fallback:
                self._ensure_fallback()
        except Exception:
            self.remove()
            raise
        _log.debug("routers installed on %s: %d ops with a kernel of their own%s", self.key, len(self.libraries),
                   ", the rest through one backend fallback" if self.fallback is not None else "")
        return self

    @property
    def ops(self) -> list[str]:
        """Every routed op: those with a router of their own and those the key's fallback serves."""
        if self._ops is None:
            self._list_ops()
        return list(self._ops or ())

    @property
    def kernelless(self) -> set[str]:
        """The routed ops without a kernel on the key, which reach the key's backend fallback."""
        if self._kernelless is None:
            self._list_ops()
        return set(self._kernelless or ())

    def _list_ops(self) -> None:
        ops, kernelless = [], set()
        for op in self.router.table.routed_ops():
            if self._routable(op):
                ops.append(op)
                if self._free_fallback and not has_native_kernel(dispatcher_op_name(op), self.key):
                    kernelless.add(op)
        self._ops, self._kernelless = ops, kernelless

    @staticmethod
    def _routable(op: str) -> bool:
        return not is_composite_implicit(op) and overload(op) is not None

    def _register(self, op: str) -> None:
        if not self._routable(op):
            return
        if self._ops is not None:
            self._ops.append(op)
        if self._free_fallback and not has_native_kernel(dispatcher_op_name(op), self.key):
            if self._kernelless is not None:
                self._kernelless.add(op)
            return
        ovl = overload(op)
        table = self.router.table
        needed = self.router.host_is_device or table.dtype_conditional(op) or \
            table.route(op, None).kind is RouteKind.NATIVE
        orig = _original_kernel(op, self.key, needed)
        library = self.libraries[op] = torch.library.Library("aten", "IMPL")
        library.impl(dispatcher_op_name(op).split("::", 1)[1], _make_router(self.router, op, ovl, orig), self.key,
                     with_keyset=True)

    def _ensure_fallback(self) -> None:
        if self.fallback is None:
            self.fallback = torch.library.Library("_", "IMPL")
            self.fallback.fallback(self._backend_fallback, self.key)

    def refresh_op(self, op_key: str, overloads: tuple[str, ...]) -> None:
        """Re-install the routers of `overloads` (the ops `op_key` names) after their kernels changed;
        the table has already forgotten its decisions about them."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
            for op in overloads:
                library = self.libraries.pop(op, None)
                if library is not None:
                    library._destroy()  # first: the op's own kernel is what _original_kernel must find
                if self._ops is not None and op in self._ops:
                    self._ops.remove(op)
                if self._kernelless is not None:
                    self._kernelless.discard(op)
                ovl = overload(op)
                if ovl is not None:
                    self._routes.pop(ovl, None)
                if self.router.table.needs_router(op):
                    self._register(op)
        if self._free_fallback:
            self._ensure_fallback()
        _log.debug("routers of %s re-installed on %s", op_key, self.key)

    def _backend_fallback(self, ovl: Any, *args: Any, **kwargs: Any) -> Any:
        """Every op without a kernel on the key lands here (the dispatcher passes the OpOverload)."""
        known = self._routes.get(ovl)
        if known is None:
            op = canonical_op_name(ovl)
            # (an op without a kernel on the key that the table routes: what `kernelless` lists)
            if not op.startswith("aten::") or not self.router.table.needs_router(op):
                # Not an op torch-fl routes (another library's op, say): what PyTorch would say.
                raise NotImplementedError(
                    f"Could not run '{op}' with arguments from the '{self.key}' backend: the operator has "
                    f"no {self.key} kernel (torch-fl's routing is active on {self.key} and routes only aten "
                    f"ops; torch.fl.deactivate() restores PyTorch's own error).")
            known = self._routes[ovl] = (op, {})
        op, routes = known
        dtype = first_dtype(args, kwargs)
        route = routes.get(dtype)
        if route is None:
            route = routes[dtype] = self.router.table.route(op, dtype)
        return self.router.call(op, ovl, route, dtype, args, kwargs, None)

    def remove(self) -> None:
        while self.libraries:
            self.libraries.popitem()[1]._destroy()
        if self.fallback is not None:
            self.fallback._destroy()
            self.fallback = None
        self._ops, self._kernelless = [], set()
        self._routes = {}


def supports_key_routing() -> bool:
    return release(torch.__version__) >= release(GET_KERNEL_SINCE)
