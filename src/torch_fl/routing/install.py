"""Install routers on the physical dispatch key, only for ops whose route is not plain native.

Native ops are never touched, so a model whose ops are all native pays nothing. Each router is a
torch.library kernel registered with ``with_keyset=True``; it keeps the op's original kernel (from
``torch.library.get_kernel``) for the dtypes that stay native. Destroying the Library restores the
dispatcher exactly.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch

from .._versions import release
from ..description.probe import all_aten_ops, dispatcher_op_name
from ..errors import TorchVersionError
from .router import Router, first_dtype
from .table import is_composite_implicit
from .translate import overload

_log = logging.getLogger("torch_fl.dispatch")
GET_KERNEL_SINCE = "2.9"  # torch.library.get_kernel (pytorch/pytorch#158393)


def _original_kernel(op: str, key: str, needed: bool) -> Any:
    """The op's own kernel on `key` (None when it has none). `needed`: the router must be able to call
    it (a dtype that stays native, or a fallback on the CPU key, which runs the CPU kernel)."""
    name = dispatcher_op_name(op)
    if not torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, key):
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
        if route.kind == "native" and call_boxed is not None:
            return call_boxed(keyset, *args, **kwargs)
        native = None if call_boxed is None else (lambda a, k: call_boxed(keyset, *a, **k))
        return router.call(op, ovl, route, dtype, args, kwargs, native)

    return route_call


class KeyInstallation:
    """Routers for one description on its dispatch key; `remove()` restores the dispatcher."""

    def __init__(self, router: Router):
        self.router = router
        self.key = router.table.description.dispatch_key
        self.library: torch.library.Library | None = None
        self.ops: list[str] = []

    def install(self) -> KeyInstallation:
        library = torch.library.Library("aten", "IMPL")
        try:
            with warnings.catch_warnings():
                # torch warns once that a kernel overrides an existing one: that is the point here.
                warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
                self._register_all(library)
        except Exception:
            library._destroy()
            raise
        self.library = library
        _log.debug("routers installed on %s for %d ops", self.key, len(self.ops))
        return self

    def _register_all(self, library: torch.library.Library) -> None:
        table = self.router.table
        for op in all_aten_ops():
            if not table.needs_router(op) or is_composite_implicit(op):
                continue
            ovl = overload(op)
            if ovl is None:
                continue
            needed = self.router.host_is_device or table.dtype_conditional(op) or \
                table.route(op, None).kind == "native"
            orig = _original_kernel(op, self.key, needed)
            name = dispatcher_op_name(op).split("::", 1)[1]
            library.impl(name, _make_router(self.router, op, ovl, orig), self.key, with_keyset=True)
            self.ops.append(op)

    def remove(self) -> None:
        if self.library is not None:
            self.library._destroy()
            self.library = None
            self.ops = []


def supports_key_routing() -> bool:
    return release(torch.__version__) >= release(GET_KERNEL_SINCE)
