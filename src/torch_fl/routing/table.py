"""The route table: for the active description, every (aten overload, dtype) gets one route.

Precedence, highest first:
  1. ``FL_ROUTE`` ('aten::gelu=translate,aten::bmm.default=fallback'; a bare name covers every overload)
  2. ``[routes]`` of the project config, then of the user config
  3. kernels registered with ``torch.fl.register_kernel``
  4. the description's explicit lists: ``ops.unsupported``, ``ops.fallback``, ``ops.translate``,
     ``ops.kernels``
  5. the native op set (``ops.native``), limited by ``precision.dtypes`` and ``ops.dtypes``
  6. the description's policy for everything else (``ops.default``)
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .. import _env
from .._names import ROUTES, RouteKind
from .._opnames import canonical_op_name, dispatcher_op_name, overloads_named
from ..description.fallback import vendor_fallback
from ..description.generations import dtype_refusal
from ..description.probe import structured_delegates
from ..errors import ConfigError
from .translate import has_translation, is_composite_implicit

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..description.model import Description



@dataclass(frozen=True)
class Route:
    """Where calls of one (op, dtype) go, and which setting decided it (`kind`: a RouteKind; its word is
    accepted and converted, and anything else is a ValueError)."""

    kind: RouteKind
    source: str
    kernel: Callable | None = None
    vendor: bool = False  # a fallback the vendor's own stack makes (ops.vendor_fallback), not torch-fl's

    def __post_init__(self) -> None:
        if type(self.kind) is not RouteKind:
            object.__setattr__(self, "kind", RouteKind(self.kind))


def _route_key(op: str, origin: str) -> str:
    """A bare 'aten::gelu' stays bare (every overload); anything with an overload is canonicalised."""
    name = op if "::" in op else f"aten::{op}"
    if "." not in name.split("::", 1)[1]:
        return name
    try:
        return canonical_op_name(name)
    except (ValueError, TypeError):
        raise ConfigError(f"{origin}: '{op}' is not an operator name ('aten::name[.overload]')") from None


def _check_listed(desc: Description, kind: str, ops: list[str]) -> None:
    """A user's description meets FL_ROUTE's check: an aten op its ops.KIND names must exist in this torch
    (ops.fallback = ["aten::gleu"] used to do nothing, silently). Built-in descriptions are generated
    from vendor registrations of several torch versions and are not held to one torch's op set."""
    origin = f"{desc.path}: ops.{kind}"
    for op in ops:
        try:
            _env.check_op(_env.FL_ROUTE, op, origin)
        except ConfigError as exc:
            raise ConfigError(str(exc).split(" Fix: ")[0] + f" Fix: correct the name in {desc.path} "
                              f"(ops.{kind}), or remove it.") from None


def _lookup(table: dict[str, object], op: str) -> object | None:
    """Exact overload first, then the bare name that covers every overload."""
    found = table.get(op)
    return found if found is not None else table.get(op.rsplit(".", 1)[0])


def dtype_name(dtype: torch.dtype | None) -> str | None:
    if dtype is None:
        return None
    name = _DTYPE_NAMES.get(dtype)
    if name is None:  # (asked on every emulated op: str(dtype) is ~0.2 us, the dict ~0.03)
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


_DTYPE_NAMES: dict[torch.dtype, str] = {}


# Returns that are no value computed in a dtype, by the schema's own names: the random-number state a
# fused kernel hands its backward, and a slot it leaves unused (CUDA's flash attention returns both as
# uint64, whatever dtypes the chip computes in).
_STATE_RETURNS = frozenset({"philox_seed", "philox_offset", "rng_state", "unused"})


@functools.cache
def computed_outputs(ovl: torch._ops.OpOverload) -> tuple[bool, ...]:
    """For each return of `ovl`, whether it is a value the chip computes in its dtype (checked against
    precision.dtypes), or state (_STATE_RETURNS, not checked)."""
    return tuple(r.name not in _STATE_RETURNS for r in ovl._schema.returns)


def foreign_output_dtype(ovl: Any, out: Any, dtypes: frozenset[str]) -> str | None:
    """The first dtype outside `dtypes` among the computed outputs of `ovl` (`out`: what it returned), or
    None. A native op can still produce a dtype the chip lacks (rfft: float32 in, complex64 out); the
    emulated device, the dispatch-mode emulator and coverage's replay all ask this."""
    computed = computed_outputs(ovl) if isinstance(ovl, torch._ops.OpOverload) else ()
    for i, value in enumerate(out if isinstance(out, (tuple, list)) else (out,)):
        if i < len(computed) and not computed[i]:
            continue
        if isinstance(value, torch.Tensor):
            name = dtype_name(value.dtype)
            if name not in dtypes:
                return name
    return None


@dataclass
class KernelEntry:
    fn: Callable
    dtypes: frozenset[str] | None  # None: every dtype
    source: str
    device_type: str | None = None  # None: every device type


@dataclass(frozen=True)
class Overrides:
    """The routes forced by the user's settings: FL_ROUTE (op -> kind) and the config files' [routes]
    (op -> (kind, origin)). Equal overrides give equal tables (routing/ keeps its tables across
    activations by description and these)."""

    env: dict[str, str]
    config: dict[str, tuple[str, str]]

    def key(self) -> tuple:
        return tuple(sorted(self.env.items())), tuple(sorted(self.config.items()))


def current_overrides() -> Overrides:
    """The overrides as the environment and config files say now."""
    # FL_ROUTE is parsed (ops checked against the dispatcher, kinds, duplicates) by the env layer. One
    # read of the layers serves both halves (each read walks the config files; this runs at every
    # torch.fl.emulate() entry): the winning layer is FL_ROUTE's value, as `value()` would resolve it.
    layers = _env.FL_ROUTE.layers()
    winner = layers[0].value if layers else _env.FL_ROUTE.parse(_env.FL_ROUTE.default)
    env = {_route_key(op, "FL_ROUTE"): kind for op, kind in winner.items()}
    config: dict[str, tuple[str, str]] = {}
    # The files' [routes] tables meet FL_ROUTE's checks (the settings layer parses both)
    files = [found for found in layers if found.kind != "environment"]
    for found in reversed(files):  # project overrides user
        origin = f"{found.source} [routes]"
        for op, kind in found.value.items():
            config[_route_key(op, origin)] = (kind, origin)
    return Overrides(env, config)


class RouteTable:
    """Routes of one description. Lookups are memoised; `forget` an op after registering kernels for it."""

    def __init__(self, desc: Description, kernels: dict[str, list[KernelEntry]] | None = None,
                 overrides: Overrides | None = None):
        self.description = desc
        self.kernels = kernels if kernels is not None else {}
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str | None], Route] = {}
        # The same decisions keyed as a dispatcher finds them (the emulated device: by op id and dtype
        # name); they live as long as the table, so re-entering an activation keeps them.
        self.dispatch_routes: dict[tuple[object, str | None], Route] = {}
        self.overrides = overrides if overrides is not None else current_overrides()
        self._env_routes, self._config_routes = self.overrides.env, self.overrides.config
        ops = desc.section("ops")
        where = f"description '{desc.name}' ({desc.path})"
        self._explicit: dict[str, tuple[str, str]] = {}
        listed_fallbacks = set(ops["fallback"])
        self._vendor_listed: set[str] = set()  # the vendor table's fallback rows: the vendor's own list
        for kind in ("translate", "fallback", "unsupported"):  # unsupported last: it wins a conflict
            if not desc.builtin:
                _check_listed(desc, kind, ops[kind])
            for op in desc.explicit_ops(kind):  # the list, plus a vendor table's fallback rows
                key = _route_key(op, where)
                if kind == RouteKind.FALLBACK and op not in listed_fallbacks:
                    self._vendor_listed.add(key)
                    self._explicit[key] = (kind, f"{where} ops.table route=fallback: the vendor registers "
                                                 f"its CPU fallback for it (the vendor's CPU-fallback list)")
                else:
                    self._vendor_listed.discard(key)
                    self._explicit[key] = (kind, f"{where} ops.{kind}")
        self._described_kernels = {_route_key(op, where): ref for op, ref in ops["kernels"].items()}
        self._dtypes = frozenset(desc.dtypes)
        self._policy = ops["default"]
        self._where = where
        self.vendor_fallback = vendor_fallback(desc)  # read once per table (activation keys tables by it)
        self._routed_ops: tuple[str, ...] | None = None

    # The native set and the per-op dtype limits are read at the first decision, not when the table is
    # made: torch.fl.device() makes it, and a vendor table's set (composite ops, view ops, its rows) is
    # most of the first call's cost (issue 43). A routed op asks them; a native op never reaches a table.
    @functools.cached_property
    def _native(self) -> frozenset[str]:
        return self.description.native_ops()

    @functools.cached_property
    def _op_dtypes(self) -> dict[str, frozenset[str]]:
        """ops.dtypes plus the vendor's documented limits, where a vendor table answers."""
        return {_route_key(op, self._where): frozenset(d) for op, d in self.description.op_dtypes().items()}

    def forget(self, op_key: str) -> tuple[str, ...]:
        """Drop what this table decided about `op_key` ('aten::gelu': every overload, or one overload)
        after its kernels changed; returns the overloads it names. Only these: a registered kernel changes one
        op's routes, not fifteen thousand."""
        named = overloads_named(op_key)
        with self._lock:
            for key in [key for key in self._cache if key[0] in named]:
                del self._cache[key]
            self.dispatch_routes = {}  # a new dict: holders of the old one (emu state) see it is stale
            if self._routed_ops is not None:
                kept = tuple(op for op in self._routed_ops if op not in named)
                self._routed_ops = kept + tuple(op for op in named if self.needs_router(op))
        return named

    # The decision ---------------------------------------------------------------------------------
    def route(self, op: str, dtype: str | None = None) -> Route:
        """The route of canonical op `op` for inputs of `dtype` (None: regardless of dtype)."""
        key = (op, dtype)
        found = self._cache.get(key)
        if found is None:
            found = self._decide(op, dtype)
            with self._lock:
                self._cache[key] = found
        return found

    def _decide(self, op: str, dtype: str | None) -> Route:
        if not op.startswith("aten::"):
            # Descriptions list aten ops; prims and custom ops carry their own (composite) kernels,
            # but they still cannot compute in a dtype the device does not have.
            if dtype is not None and dtype not in self._dtypes:
                return Route(RouteKind.UNSUPPORTED, f"{self._where} precision.dtypes: no {dtype} on this device")
            return Route(RouteKind.NATIVE, "not an aten operator")
        forced = _lookup(self._env_routes, op)
        if forced is not None:
            return self._forced(op, dtype, str(forced), "FL_ROUTE")
        configured = _lookup(self._config_routes, op)
        if configured is not None:
            kind, origin = configured  # type: ignore[misc]
            return self._forced(op, dtype, kind, origin)
        kernel = self._kernel(op, dtype)
        if kernel is not None:
            return kernel
        explicit = _lookup(self._explicit, op)
        if explicit is not None:
            kind, origin = explicit  # type: ignore[misc]
            if kind == RouteKind.FALLBACK and (op in self._vendor_listed or op.rsplit(".", 1)[0] in self._vendor_listed):
                return Route(kind, origin, vendor=True)
            return self._forced(op, dtype, kind, origin)
        if self.is_native(op, dtype):
            return Route(RouteKind.NATIVE, f"{self._where} ops.native ({self.description.native_source})")
        if self.vendor_fallback.on and op not in self._native and (dtype is None or dtype in self._dtypes):
            vendor = self._vendor_route(op)
            if vendor is not None:
                return vendor
        route = self._policy_route(op, dtype)
        if dtype is not None and self.is_native(op, None):  # native, but not in this dtype: say why
            why = dtype_refusal(self.description, op, dtype)
            if why:
                return dataclasses.replace(route, source=f"{route.source} ({dtype}: {why})")
        return route

    def _vendor_route(self, op: str) -> Route | None:
        """The vendor's CPU fallback for an op the chip has no kernel for (ops.vendor_fallback = 'cpu'),
        where the real stack reaches it: PyTorch's dispatcher takes a composite kernel before a backend
        fallback, so only ops without one get there (a structured op's generated forwarder gets there
        through its out= overload), and the vendor's fallback runs the CPU kernel, so an op the CPU has
        no kernel for is left to ops.default. torch-fl's own translation would not match the real
        stack here: the stack runs these ops on the CPU, never their decomposition."""
        reaches, through = backend_fallback_entry(op)
        if not reaches:
            return None
        from .reference import has_cpu_kernel

        if not has_cpu_kernel(through or op):
            return None
        return Route(RouteKind.FALLBACK, f"{self._where} " + self.vendor_fallback.reason(
            dispatcher_op_name(op), dispatcher_op_name(through) if through else None), vendor=True)

    def _forced(self, op: str, dtype: str | None, kind: str, origin: str) -> Route:
        if kind == RouteKind.KERNEL:
            kernel = self._kernel(op, dtype)
            if kernel is None:
                raise ConfigError(f"{origin} routes {op} to 'kernel', but no kernel is registered for it; "
                                  f"call torch.fl.register_kernel('{op}', fn) or name one in the "
                                  f"description's [ops.kernels]")
            return Route(RouteKind.KERNEL, origin, kernel.kernel)
        return Route(kind, origin)

    def _kernel(self, op: str, dtype: str | None) -> Route | None:
        for name in (op, op.rsplit(".", 1)[0]):
            for entry in reversed(self.kernels.get(name, [])):  # the latest registration wins
                if entry.device_type not in (None, self.description.device_type):
                    continue
                if entry.dtypes is None or dtype is None or dtype in entry.dtypes:
                    return Route(RouteKind.KERNEL, entry.source, entry.fn)
        ref = _lookup(self._described_kernels, op)
        if ref is not None:
            return Route(RouteKind.KERNEL, f"{self._where} ops.kernels", _import_kernel(str(ref), self._where))
        return None

    def is_native(self, op: str, dtype: str | None) -> bool:
        if op not in self._native and not is_composite_implicit(op):
            return False
        if dtype is None:
            return True
        limits = _lookup(self._op_dtypes, op)
        return dtype in self._dtypes and (limits is None or dtype in limits)  # type: ignore[operator]

    def _policy_route(self, op: str, dtype: str | None) -> Route:
        source = f"{self._where} ops.default = '{self._policy}'"
        if self._policy in ("translate-or-error", "translate-or-fallback") and has_translation(op):
            return Route(RouteKind.TRANSLATE, source)
        if self._policy in ("translate-or-fallback", "fallback"):
            return Route(RouteKind.FALLBACK, source)
        why = "" if self._policy == "error" else " and no generic (decomposed) implementation exists"
        vendor = self.vendor_fallback
        if vendor.flipped and not vendor.on:
            why += f"; the vendor's CPU fallback is off ({vendor.setting()})"
        return Route(RouteKind.UNSUPPORTED, source + f": not native{why}")

    def untranslatable(self, route: Route, why: str) -> Route:
        """Where a call routed to 'translate' goes when its translation cannot run for it (there is
        none, it keeps calling the op itself, or it returns NotImplemented for these inputs): the CPU
        under ``ops.default = 'translate-or-fallback'``, else an error. The router and coverage's
        chains (torch_fl.analysis.chains) both decide it here."""
        if self._policy == "translate-or-fallback":
            return Route(RouteKind.FALLBACK, f"{route.source}; translation failed: {why}")
        return Route(RouteKind.UNSUPPORTED, f"{route.source}: cannot translate: {why}")

    def creation(self, op: str, dtype: str | None) -> Route | None:
        """The route of a factory call (no tensor argument) that the description decides before its
        op's route: a tensor of a dtype outside ``precision.dtypes`` cannot exist on the device, so
        its creation fails. None: route it as usual."""
        if dtype is not None and dtype not in self._dtypes:
            return Route(RouteKind.UNSUPPORTED, f"{self._where} precision.dtypes: {op} creates a {dtype} tensor, "
                                        f"which this device cannot hold")
        return None

    def summary(self, dtype: str | None = None) -> dict[str, int]:
        """How many aten overloads this process's dispatcher knows take each route (for `dtype`)."""
        from ..description.probe import all_aten_ops

        counts = dict.fromkeys(ROUTES, 0)
        for op in all_aten_ops():
            counts[self.route(op, dtype).kind] += 1
        return counts

    # Installation support -------------------------------------------------------------------------
    def routed_ops(self) -> tuple[str, ...]:
        """Every aten op whose calls need a router (`needs_router`), computed once per table: deciding
        it for all ~15,000 ops took ~35 ms and swept the CPU caches on every activation, so a bench
        that switches routing on and off between blocks measured its own activation (issue 31)."""
        from ..description.probe import all_aten_ops

        found = self._routed_ops
        if found is None:
            found = self._routed_ops = tuple(op for op in all_aten_ops() if self.needs_router(op))
        return found

    def named_ops(self) -> tuple[str, ...] | None:
        """The aten overloads that need a router although the dispatcher has a kernel for them, read from
        the settings that name ops (FL_ROUTE, config [routes], registered and described kernels, the
        explicit lists, per-op dtype limits) without asking the other ~3,100 overloads. Valid where the
        native set is this process's own probe of the dispatch key: an op with a kernel there is native
        unless a setting names it. None where a list or a table gives the native set (an op with a kernel
        may still be non-native there): `routed_ops` then asks every overload."""
        desc = self.description
        if desc.data["ops"]["native"] != "probe" or desc.native_table() is not None:
            return None
        keys = [*self._env_routes, *self._config_routes, *self.kernels, *self._described_kernels,
                *self._explicit, *self._op_dtypes]
        named = dict.fromkeys(op for key in keys if key.startswith("aten::") for op in overloads_named(key))
        return tuple(op for op in named if self.needs_router(op))

    def needs_router(self, op: str) -> bool:
        """Whether calls of `op` must pass through a router (cheap: never builds a translation)."""
        for overrides in (self._env_routes, self._config_routes):
            found = _lookup(overrides, op)
            if found is not None:
                kind = found if isinstance(found, str) else found[0]
                return kind != RouteKind.NATIVE or self.dtype_conditional(op)  # (a str from FL_ROUTE or a member)
        if self._kernel(op, None) is not None or _lookup(self._explicit, op) is not None:
            return True
        # (the dtype limits first: named_ops asks about named ops only, which need no native set for it)
        return self.dtype_conditional(op) or not self.is_native(op, None)

    def dtype_conditional(self, op: str) -> bool:
        """Whether the route of `op` can differ by dtype (so a router must look at each call)."""
        if _lookup(self._op_dtypes, op) is not None:
            return True
        return any(e.dtypes is not None for n in (op, op.rsplit(".", 1)[0]) for e in self.kernels.get(n, []))


@functools.cache
def backend_fallback_entry(op: str) -> tuple[bool, str | None]:
    """Whether a call of `op` on a backend that registers no kernel for it reaches that backend's fallback
    (PyTorch's dispatcher prefers any composite kernel), and the out= overload it gets there through
    when a structured op's generated CompositeExplicitAutogradNonFunctional forwarder runs first (None:
    the op itself). Other NonFunctional kernels (the *_copy view ops) compose on the device: no."""
    name = dispatcher_op_name(op)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        if has(name, "CompositeImplicitAutograd") or has(name, "CompositeExplicitAutograd"):
            return False, None
        if has(name, "CompositeExplicitAutogradNonFunctional"):
            target = structured_delegates().get(op)
            return (True, target) if target else (False, None)
    except RuntimeError:  # not an operator this dispatcher knows
        return False, None
    return True, None


def placeholder(ovl: torch._ops.OpOverload, args: tuple) -> bool:
    """A factory call for a tensor of no elements (batch norm's uint8 reserve of size 0): no device
    needs a kernel or a dtype for it, so it is neither routed nor counted."""
    size = args[0] if args and _size_first(ovl) else None
    return isinstance(size, (list, tuple)) and 0 in size


@functools.cache
def _size_first(ovl: torch._ops.OpOverload) -> bool:
    arguments = ovl._schema.arguments  # builds the schema's Python objects: slow, so once per overload
    return bool(arguments) and arguments[0].name == "size"


def _import_kernel(ref: str, where: str) -> Callable:
    import importlib

    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where} ops.kernels names '{ref}', which cannot be imported: {exc}") from None
