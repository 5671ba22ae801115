"""Randomness of the emulated devices: each device draws from its own default generator.

On a real accelerator ``torch.npu.manual_seed(s)`` seeds the device's generator and every random op on
the device (``torch.rand(device=...)``, ``uniform_``, ``bernoulli``, dropout...) draws from it, never
from the host's: host draws in between do not change the device's numbers. The emulated device's data
lives on the host, so its generator is a CPU ``torch.Generator`` (an ``_EmuGenerator`` reporting the
device): an emulated device seeded with ``s`` draws exactly what a CPU generator seeded with ``s`` draws
(not what the real chip's generator would: Philox on CUDA, the vendor's own elsewhere).

A random op with no ``generator=`` argument of its own (``rand_like``, ``native_dropout``, ``randn``
without one) runs with the host's default generator swapped for the device's, and the device's state
taken back afterwards (`device_stream`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .generator import _EmuGenerator, device_generator
from .slot import _no_device, backend_name, state

_generators: list[_EmuGenerator] = []
_lock = threading.RLock()
_local = threading.local()  # .depth: 1 while this thread runs inside device_stream()


def default_generator(index: int) -> torch.Generator:
    """The default generator of emulated device `index`: made on first use, seeded as a fresh generator
    is (PyTorch's default seed, as a real device's default generator before any seeding)."""
    if index < len(_generators):
        return _generators[index]
    with _lock:
        while len(_generators) <= index:
            _generators.append(device_generator(len(_generators)))
    return _generators[index]


def default_generators() -> tuple[torch.Generator, ...]:
    """One default generator per emulated device (``torch.npu.default_generators``)."""
    return tuple(default_generator(i) for i in range(max(state.count, 1)))


def index_of(where: Any) -> int:
    """The device index `where` names (an int, 'npu', 'npu:1', a torch.device; None: the current one)."""
    if where is None:
        return state.current
    if isinstance(where, int):
        where = torch.device(backend_name(), where)
    where = torch.device(where)
    if where.type != backend_name():
        raise ValueError(f"{where} is not an emulated device: the generators here are those of "
                         f"{backend_name()}:0..{backend_name()}:{max(state.count, 1) - 1} (pass one of them, "
                         f"or use torch.get_rng_state() for the host's)")
    index = state.current if where.index is None else where.index
    if not 0 <= index < max(state.count, 1):
        raise _no_device(index)
    return index


def seeded(func: Any) -> bool:
    """Whether `func` draws random numbers (PyTorch tags every such op ``nondeterministic_seeded``)."""
    return torch.Tag.nondeterministic_seeded in func.tags


def inside_stream() -> bool:
    """Whether this thread runs inside `device_stream`: the host's generator is the device's there, so
    nested random ops (a decomposition's sub-ops) draw from it as they are."""
    return getattr(_local, "depth", 0) > 0


def call(func: Any, index: int, run: Callable[[Any, tuple, dict], Any], args: tuple, kwargs: dict, *,
         own_kernel: bool = True) -> Any:
    """``run(kernel, args, kwargs)``, the random op `func` on device `index`, drawing from the device's
    generator. `kernel` is None (the op's own) or the kernel that computes `func` with the device's
    generator, where `func` has no generator argument but a sibling that has (``rand`` -> ``rand.generator``,
    ``native_dropout``'s CPU math); `own_kernel`: whether the caller computes `func` with its own kernel (a
    replacement then may stand in for it). The generator goes in as an argument wherever it can: a graph
    that torch.compile traces through the device then keeps it (the graph computes with the host data, and
    would otherwise draw from the host's generator). Otherwise (an op no kernel here takes a generator for)
    `device_stream`. An explicit ``generator=`` of the call wins, as on every device."""
    if inside_stream():
        return run(None, args, kwargs)
    where = _generator_arguments.get(func, False)
    if where is False:
        where = _generator_arguments[func] = _generator_argument(func)
    if where is None:
        with_generator = _KERNELS.get(func) if own_kernel else None
        if with_generator is not None:
            return run(functools.partial(with_generator, generator=default_generator(index)), args, kwargs)
        with device_stream(index):
            return run(None, args, kwargs)
    position, name, kwarg_only = where
    generator = default_generator(index)
    if not kwarg_only and position < len(args):
        if args[position] is not None:
            return run(None, args, kwargs)
        return run(None, (*args[:position], generator, *args[position + 1:]), kwargs)
    if kwargs.get(name) is not None:
        return run(None, args, kwargs)
    return run(None, args, {**kwargs, name: generator})


def _native_dropout(input: torch.Tensor, p: float, train: bool | None, *, generator: torch.Generator) -> tuple:
    """``native_dropout`` as the CPU computes it (a bool keep-mask drawn with bernoulli_(1 - p), the input
    scaled by 1 / (1 - p)), drawing from `generator`."""
    if input.numel() == 0:
        return input, torch.empty_like(input)
    if train is False:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    keep = 1.0 - p
    mask = torch.empty_like(input, dtype=torch.bool).bernoulli_(keep, generator=generator)
    return input.mul(mask).mul_(0.0 if keep == 0 else 1.0 / keep), mask


def _siblings() -> dict[Any, Callable[..., Any]]:
    """Each random aten overload without a generator argument whose overload packet has the same one with
    it (``rand`` -> ``rand.generator``, ``randint.low`` -> ``randint.low_generator``, the ``*_like`` and out=
    forms): the same numbers from a given generator."""
    aten = torch.ops.aten
    found: dict[Any, Callable[..., Any]] = {aten.native_dropout.default: _native_dropout}
    for name in ("rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like"):
        packet = getattr(aten, name)
        overloads = [getattr(packet, o) for o in packet.overloads()]
        for ovl in overloads:
            if _generator_argument(ovl) is not None:
                continue
            plain = [(a.name, str(a.type)) for a in ovl._schema.arguments]
            for other in overloads:
                if _generator_argument(other) is not None and \
                        [(a.name, str(a.type)) for a in other._schema.arguments if a.name != "generator"] == plain:
                    found[ovl] = other
    return found



_generator_arguments: dict[Any, tuple[int, str, bool] | None] = {}


def _generator_argument(func: Any) -> tuple[int, str, bool] | None:
    """(position, name, keyword-only) of `func`'s ``generator`` argument, else None."""
    for position, argument in enumerate(func._schema.arguments):
        if argument.name == "generator":
            return position, argument.name, argument.kwarg_only
    return None


@contextlib.contextmanager
def device_stream(index: int) -> Iterator[None]:
    """Run a random op that takes no generator argument on device `index`'s stream: the host's default
    generator holds the device generator's state meanwhile, and gives it back afterwards. (Another
    thread drawing on the host during that op would draw from the device's stream; ops of the emulated
    devices take turns.)"""
    if inside_stream():
        yield
        return
    device = default_generator(index)
    host = torch.default_generator
    with _lock:
        saved = host.get_state()
        host.set_state(device.get_state())
        _local.depth = 1
        try:
            yield
        finally:
            _local.depth = 0
            device.set_state(host.get_state())
            host.set_state(saved)


def first_index(args: tuple, kwargs: dict, tensor_type: type) -> int:
    """The device of the first emulated tensor among `args`/`kwargs` (lists included), else the current."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, tensor_type):
            return value._index
        if isinstance(value, (list, tuple)):
            for one in value:
                if isinstance(one, tensor_type):
                    return one._index
    return state.current


_KERNELS = _siblings()  # (after _generator_argument, which it calls)
