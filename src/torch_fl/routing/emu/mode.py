"""The dispatch-mode emulator: run on the CPU while enforcing a description's native (op, dtype) set.

The emulated device (the rest of this package) is the default; this mode runs instead where that device cannot
exist (a vendor plugin owns PrivateUse1, or a backward pass ran before it was registered) and for route
checks on host tensors (``torch.fl.emulate(name, host=True)``). Unlike the device, it checks every CPU op
of the block, host work included, and cannot catch a forgotten ``.to(device)``.

A TorchDispatchMode sees every aten call below autograd (after CompositeImplicitAutograd ops have
decomposed, as a real backend would) and hands it to the same Router as a real dispatch key. Inside
``__torch_dispatch__`` the mode is popped, so native calls run on the CPU directly; translations
re-enter the mode so their sub-ops are checked as well. SDPA takes its math
path when the description has ``ops.fused_attention = false`` or is not a CPU: its fused-kernel choice
is made in C++ by device type, and the CPU's fused kernel exists on no other chip.
"""

from __future__ import annotations

import contextlib
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

from ..._mode_exit import EnteredMode
from ..._names import RouteKind
from ..._opnames import canonical_op_name
from ..router import Router, first_dtype
from ..table import Route, foreign_output_dtype
from .tensor import never_traced


class EmulationMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch wraps a mode's __torch_dispatch__ in torch._disable_dynamo, whose first call imports
        # torch._dynamo (822 modules, sympy and DTensor among them, ~1 s at the first emulated op); the code
        # flag below skips Dynamo the same way, recursively, without importing it (issue 43)
        return False

    def __init__(self, router: Router):
        super().__init__()
        self.router = router
        self.table = router.table
        self.dtypes = frozenset(router.table.description.dtypes)
        self._names: dict[Any, str] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = self._names.get(func)
        if op is None:
            op = self._names[func] = canonical_op_name(func)
        dtype = first_dtype(args, kwargs)
        route = self.table.route(op, dtype)
        if route.kind is RouteKind.NATIVE:
            out = func(*args, **kwargs)
            self._check_outputs(func, op, route, args, kwargs, out)
            return out
        return self.router.call(op, func, route, dtype, args, kwargs,
                                native=lambda a, k: func(*a, **k), reenter=self)

    def _check_outputs(self, func: Any, op: str, route: Route, args: tuple, kwargs: dict, out: Any) -> None:
        """A native op can still produce a dtype the chip lacks (rfft: float32 in, complex64 out); on
        the chip that fails here, not at the next op that happens to read the result."""
        produced = foreign_output_dtype(func, out, self.dtypes)
        if produced is not None:
            raise self.router.error(op, args, kwargs, Route(RouteKind.UNSUPPORTED, route.source),
                                    f"it produces {produced}, which is not in precision.dtypes")


never_traced(EmulationMode.__torch_dispatch__.__code__)  # (as EmuTensor's: Dynamo runs it as it is)


class Emulation:
    """An entered emulation: the dispatch mode plus the SDPA backend restriction; `remove()` exits."""

    def __init__(self, router: Router):
        self.router = router
        self._stack = contextlib.ExitStack()

    def install(self) -> Emulation:
        desc = self.router.table.description
        # SDPA picks its kernel in C++ by device type: on the CPU it would pick the CPU's fused kernel,
        # which no other chip has; a chip without fused attention takes the math path too.
        if desc.device_type != "cpu" or not desc.section("ops")["fused_attention"]:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            self._stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        self._stack.callback(EnteredMode(EmulationMode, self.router).exit)  # (a gloo deadlock otherwise)
        return self

    def remove(self) -> None:
        self._stack.close()
