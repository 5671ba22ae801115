"""The general dispatch of an op on the emulated device: planned once per op, then routed and run.

`_Plan` is what the dispatch needs to know about one op, found at its first call (a handler of its own in
`SPECIAL`, the kernel that computes it, whether it writes or views an argument, whether it draws random
numbers). `_dispatch` runs a call by its plan: unwrap the device tensors (wrapping.py), ask the route
table of the emulated description for (op, dtype) -- native calls run the CPU kernel on the held data,
other routes go through the same Router as a real dispatch key -- and wrap the results. The common call
does not come here: tensor.py's ``EmuTensor.__torch_dispatch__`` runs it inline from the same plan.

A sparse tensor's op goes to the chip's sparse key (the plugin's sparse registrations, sparse.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..._names import RouteKind
from ..._opnames import canonical_op_name
from ..reference import REFERENCE
from ..router import first_dtype
from ..table import Route, dtype_name
from . import composites, wider
from . import rng as _rng
from . import sparse as _sparse
from .slot import backend_name, state
from .wrapping import _NATIVE, _check_outputs, _finish, _is_view, _unwrap

# (read on every call: a module global is ~4x faster to read than an Enum member)
NATIVE_KIND = RouteKind.NATIVE

aten = torch.ops.aten

# Ops with a handler of their own (the other modules of the emulator add theirs).
SPECIAL: dict[Any, Callable[[Any, tuple, dict], Any]] = {}
# Ops PyTorch tags nondeterministic_seeded whose SPECIAL handler never draws a random number (its module
# says why): the dispatch then skips the device generator's save and restore around them (rng.py).
DRAWS_NOTHING: set[Any] = set()


def _written_argument(func: Any) -> tuple[int, str] | None:
    """(position, name) of the argument a single-result op writes and returns, else None."""
    returns = func._schema.returns
    if len(returns) != 1 or returns[0].alias_info is None or not returns[0].alias_info.is_write:
        return None
    for i, argument in enumerate(func._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            return i, argument.name
    return None


# resize_as_'s own kernel resizes through the backend (and so through the device's resize_)
_RESIZES = {aten.resize_as_.default}


def _out_arguments(func: Any) -> list[tuple[int, str]] | None:
    """(position, name) of each out= argument of an op that returns several of them, else None."""
    returns = func._schema.returns
    if len(returns) < 2 or not all(r.alias_info is not None and r.alias_info.is_write for r in returns):
        return None
    outs = [(i, a.name) for i, a in enumerate(func._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]
    return outs if len(outs) == len(returns) else None



class _Plan:
    """What the dispatch needs to know about one op, found once: the hot path then makes a single dict
    lookup keyed by the op's id (an OpOverload's own __hash__ is Python code, ~0.5 us a call)."""

    __slots__ = ("call", "fast", "func", "fused", "fused_for", "inherited", "kernel", "lists", "metadata", "name",
                 "outs", "resizes", "routes", "routes_of", "seeded", "special", "view", "written")

    def __init__(self, func: Any) -> None:
        self.func = func  # (holds the op, so its id stays its own)
        self.special = SPECIAL.get(func)
        if self.special is None and _device_kernel_registered(func):
            self.special = _device_kernel
        if self.special is None and _composite(func):
            self.special = _decompose
        # the CPU kernel, or the reference math of a chip kernel the CPU lacks (routing/reference.py)
        self.kernel = REFERENCE.get(func) or composites.HOST.get(func, func)
        # the kernel's C++ entry: OpOverload.__call__ is a Python frame that only calls it (~0.15 us)
        self.call = self.kernel._op if type(self.kernel) is torch._ops.OpOverload else self.kernel
        self.name = canonical_op_name(func)
        self.written = _written_argument(func)
        self.view = _is_view(func)
        self.metadata = torch.Tag.inplace_view in func.tags
        # an in-place change of shape with no kernel that runs on a wrapper's metadata alone
        composite = any(torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)
                        for key in ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"))
        # an in-place view every backend inherits (as_strided_, transpose_, unsqueeze_...: PyTorch's
        # composite kernel, no chip kernel): never asked of the chip's route table
        self.inherited = self.metadata and composite
        self.resizes = self.metadata and (func in _RESIZES or not torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), "CompositeExplicitAutograd"))
        self.outs = _out_arguments(func) if self.written is None else None
        # a random op: it draws from its device's generator, never the host's (rng.py); not one whose handler
        # never draws although PyTorch tags the op (DRAWS_NOTHING)
        self.seeded = _rng.seeded(func) and func not in DRAWS_NOTHING
        # unwrap-run-wrap (or run and return the argument written) is all this op needs: no handler of
        # its own, no in-place change of shape, no generator to choose
        self.fast = self.special is None and not self.metadata and not self.seeded
        # an argument that is a list of tensors (cat, stack, index): a list argument is then not ints
        self.lists = any(isinstance(a.type, torch.ListType) and not _int_list(a.type)
                         for a in func._schema.arguments)
        # the routes of this op by torch.dtype, for the route table `routes_of` (state.routes: set_router
        # replaces it, and so drops these)
        self.routes: dict[torch.dtype, Route] = {}
        self.routes_of: dict | None = None
        # computed by PyTorch's composite on the host: a chip whose vendor has a kernel of its own rounds
        # half results once (wider.py); the kernel for the chip of `fused_for` (its route table)
        self.fused = self.special is None and self.kernel is func and \
            (wider.host_composite(func) or wider.accumulated(self.name))
        self.fused_for: tuple[Any, Any] | None = None


def _chip_kernel(plan: _Plan) -> Any:
    """`plan`'s kernel on the emulated chip: its vendor's fused kernel (half inputs computed in float32,
    rounded once) where the chip registers one for an op the host composes, else the host's."""
    routes = state.routes
    cached = plan.fused_for
    if cached is not None and cached[0] is routes:
        return cached[1]
    desc = state.description
    once = wider.accumulates_in_float(desc, plan.name) if wider.accumulated(plan.name) else \
        wider.vendor_fused(desc, plan.name)
    kernel = wider.rounding_once(plan.kernel) if once else plan.kernel
    plan.fused_for = (routes, kernel)
    return kernel


_plans: dict[int, _Plan] = {}


def _int_list(kind: Any) -> bool:
    element = kind.getElementType()
    if isinstance(element, torch.OptionalType):
        element = element.getElementType()
    return isinstance(element, (torch.IntType, torch.SymIntType, torch.FloatType, torch.BoolType))


def _plain_kwargs(kwargs: dict) -> bool:
    """Keywords the fast path passes on as they are: no tensor, no list, no device (memory_format=, dim=...)."""
    for value in kwargs.values():
        kind = type(value)
        if kind is list or kind is tuple or kind is torch.device or isinstance(value, torch.Tensor):
            return False
    return True



def _dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    plan = _plans.get(id(func))
    if plan is None:
        plan = _plans[id(func)] = _Plan(func)
    if plan.seeded:
        index = _rng.first_index(args, kwargs, state.tensor_type)
        return _rng.call(func, index, lambda kernel, a, k: _dispatch_planned(plan, func, a, k, kernel), args, kwargs,
                         own_kernel=plan.kernel is func and plan.special is None)
    return _dispatch_planned(plan, func, args, kwargs)


def _dispatch_planned(plan: _Plan, func: Any, args: tuple, kwargs: dict, kernel: Any = None) -> Any:
    """The dispatch of `func` once planned; `kernel`: what computes it instead of the plan's own (a random
    op's kernel that takes the device's generator: rng.py)."""
    if kernel is None:
        kernel = plan.kernel if not plan.fused else _chip_kernel(plan)
    if plan.special is not None:
        return plan.special(func, args, kwargs)
    index, cargs, ckwargs = _unwrap(func, args, kwargs)
    target = kwargs.get("device")
    if target is not None and torch.device(target).type != backend_name():
        # empty_like(x, device="cpu"), x.new_zeros(.., device="cpu"): made on the device asked for, as
        # PyTorch makes them (nothing of the emulated chip runs)
        return kernel(*cargs, **ckwargs)
    router = state.router
    if router is None or plan.inherited:
        return _finish(plan, args, kwargs, kernel(*cargs, **ckwargs), index)
    first = args[0] if args else None
    dtype = dtype_name(first.dtype) if type(first) is state.tensor_type else first_dtype(cargs, ckwargs)
    chip = _sparse_chip()
    # (a chip without sparse kernels of its own runs sparse ops as dense ones: no need to walk the arguments)
    sparse = _sparse_key(args, kwargs) if chip is not None else None
    if sparse is not None and chip is not None:
        if "device" in ckwargs:  # a sparse factory over device indices and values: made on the host
            ckwargs = {**ckwargs, "device": torch.device("cpu")}
        if not _sparse.registered(chip, sparse, func, plan.name) or (dtype is not None and
                                                                     dtype not in state.dtypes):
            return _sparse_call(plan, func, chip, sparse, dtype, args, kwargs, None, index)
        kernel = chip.reference.get(plan.name, kernel)
        return _sparse_call(plan, func, chip, sparse, dtype, args, kwargs, kernel(*cargs, **ckwargs), index)
    key = (id(func), dtype)
    route = state.routes.get(key)
    if route is None:
        route = state.routes[key] = state.table.route(plan.name, dtype)
    if route.kind is NATIVE_KIND:
        out = kernel(*cargs, **ckwargs)
        _check_outputs(func, route, args, kwargs, out)
        return _finish(plan, args, kwargs, out, index)

    def native(_a: tuple, _k: dict) -> Any:
        return _finish(plan, args, kwargs, kernel(*cargs, **ckwargs), index)

    return router.call(plan.name, func, route, dtype, args, kwargs, native=native)



def _sparse_key(args: tuple, kwargs: dict) -> str | None:
    """The sparse backend key of a call (sparse.COO, sparse.CSR), or None for a dense one: the layout of
    its first sparse device tensor, else of a factory's ``layout=``."""
    emu = state.tensor_type
    for arg in args:
        if type(arg) is emu:
            if not arg._plain and arg.layout is not torch.strided:
                return _sparse.key_of(arg.layout)
        elif type(arg) is list or type(arg) is tuple:
            for item in arg:
                if type(item) is emu and not item._plain and item.layout is not torch.strided:
                    return _sparse.key_of(item.layout)
    if kwargs:
        layout = kwargs.get("layout")
        if layout is not None and layout is not torch.strided:
            return _sparse.key_of(layout)
    return None


_sparse_of: list[Any] = [None, None]  # (state.routes, the chip's sparse kernels): set_router replaces routes


def _sparse_chip() -> _sparse.SparseKernels | None:
    """The emulated chip's plugin sparse registrations (sparse.py), None for a chip without such facts."""
    if _sparse_of[0] is not state.routes:
        desc = state.description
        _sparse_of[:] = [state.routes, _sparse.kernels(wider.chip_key(desc)) if desc is not None else None]
    return _sparse_of[1]


def _sparse_call(plan: _Plan, func: Any, chip: _sparse.SparseKernels, key: str, dtype: str | None, args: tuple,
                 kwargs: dict, out: Any, index: int) -> Any:
    """A call on the chip's sparse key: `out` is the host's sparse kernel's result, None where the chip has no
    kernel for the op (its plugin's error) or for the dtype (torch-fl's UnsupportedOperatorError)."""
    if out is None:
        if dtype is not None and dtype not in state.dtypes:
            raise state.router.error(plan.name, args, kwargs, Route(RouteKind.UNSUPPORTED, "precision.dtypes"),
                                     f"{dtype} is not in precision.dtypes")
        raise _sparse.refusal(chip, key, plan.name, backend_name())
    _check_outputs(func, _NATIVE, args, kwargs, out)
    return _finish(plan, args, kwargs, out, index)



def _composite(func: Any) -> bool:
    """A CompositeImplicitAutograd op reaches the device only where autograd is off (inference mode: no
    autograd key decomposes it first). A real backend still runs its composite kernel, and so does this
    one: ``x.to("cpu")`` copies to the host, views keep their version counter. (The ops of composites.py, which
    chips also have kernels of, reach the device only where the chip has the kernel: they run it.)"""
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd") and \
        func.name().removeprefix("aten::") not in composites.OPS


# PyTorch's own namespaces: their PrivateUse1 kernels are the emulator's (factories.py), never a user's
_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d", "_quantized", "quantized"})
_PRIVATEUSE1 = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)


def _device_kernel_registered(func: Any) -> bool:
    """A kernel of an op of a library of its own registered for the device's key (``torch.library.Library(ns,
    "DEF").impl(name, fn, "PrivateUse1")``, or the vendor's key name, as torch_musa's tests/unittest/miscs/
    test_torch_library.py registers one for "MUSA"): the device runs that kernel, as a real backend does."""
    return getattr(func, "namespace", "aten") not in _TORCH_NAMESPACES and \
        torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "PrivateUse1")


def _device_kernel(func: Any, args: tuple, kwargs: dict) -> Any:
    """Call the kernel registered for the device's key with the device tensors themselves (the Python key,
    which brought the call here, sits above it; the CPU data would reach the op's CPU kernel, which it lacks)."""
    return torch.library.get_kernel(func, "PrivateUse1").call_boxed(_PRIVATEUSE1, *args, **kwargs)


def _decompose(func: Any, args: tuple, kwargs: dict) -> Any:
    return func.decompose(*args, **kwargs)

