"""The backend module PyTorch asks for (``torch.emu``: device count, current device, seeding, amp
dtypes, memory), the PrivateUse1 hooks and the device guard."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from . import memory, rng
from .slot import backend_name, state
from .streams import elapsed_ms


class _BackendModule:
    """``torch.emu``: what PyTorch asks a backend module for (device count, amp dtypes, seeding)."""

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def current_device() -> int:
        return state.current

    @staticmethod
    def set_device(index: int | torch.device) -> None:
        state.current = index.index or 0 if isinstance(index, torch.device) else int(index)

    @staticmethod
    def device_count() -> int:
        return state.count

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    # Seeding (rng.py): each emulated device has a default generator of its own, as each real chip has;
    # torch.manual_seed(s) reaches manual_seed_all through PyTorch's hook for the PrivateUse1 module.
    @staticmethod
    def manual_seed(seed: int) -> None:
        """Seed the current device's generator."""
        rng.default_generator(state.current).manual_seed(int(seed))

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        """Seed every emulated device's generator."""
        for generator in rng.default_generators():
            generator.manual_seed(int(seed))

    @staticmethod
    def seed() -> None:
        """Seed the current device's generator with a non-deterministic number."""
        rng.default_generator(state.current).seed()

    @staticmethod
    def seed_all() -> None:
        """Seed every device's generator with one non-deterministic number (as torch.cuda.seed_all)."""
        generators = rng.default_generators()
        seed = generators[0].seed()
        for generator in generators[1:]:
            generator.manual_seed(seed)

    @staticmethod
    def initial_seed() -> int:
        """The seed the current device's generator was last seeded with."""
        return rng.default_generator(state.current).initial_seed()

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        """The state of `device`'s generator (a CPU uint8 tensor, as torch.cuda.get_rng_state gives)."""
        return rng.default_generator(rng.index_of(device)).get_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
        """Restore `device`'s generator to `new_state` (from get_rng_state)."""
        if new_state.device.type != "cpu":  # (a state kept on the device is read back first)
            new_state = new_state.cpu()
        rng.default_generator(rng.index_of(device)).set_state(new_state)

    @property
    def default_generators(self) -> tuple[torch.Generator, ...]:
        """One per emulated device, the generator that device's random ops draw from
        (what torch.cuda.default_generators gives under the CUDA alias: Lightning's isolate_rng)."""
        return rng.default_generators()

    @staticmethod
    def get_rng_state_all() -> list[torch.Tensor]:
        return [generator.get_state() for generator in rng.default_generators()]

    @staticmethod
    def set_rng_state_all(new_states: Any) -> None:
        for index, new_state in enumerate(new_states):
            _BackendModule.set_rng_state(new_state, index)

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        desc = state.description
        names = desc.dtypes if desc is not None else ("float16", "bfloat16")
        return [getattr(torch, n) for n in names if n in ("float16", "bfloat16")]

    @staticmethod
    def synchronize(device: Any = None) -> None:
        state.syncs += 1

    # What torch.fl.memory_allocated() and friends report on the emulated device: its live tensor bytes.
    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return memory.memory_allocated(_index_of(device))

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return memory.max_memory_allocated(_index_of(device))

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        memory.reset_peak_memory_stats(_index_of(device))

    # nothing is cached beyond live tensors (freed device tensors return their host memory at once), so
    # reserved is allocated; memory_stats is CUDA's flat layout of the same counts (memory.flat_stats)
    memory_reserved = memory_allocated
    max_memory_reserved = max_memory_allocated

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        return memory.flat_stats(_index_of(device))

    @staticmethod
    def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
        return "\n".join(f"{key}: {value}" for key, value in _BackendModule.memory_stats(device).items())

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """(free, total): the device's memory is host memory, less what its live tensors hold."""
        from ...hostmem import memory_info

        free, total = memory_info()
        return max(0, min(free, total - sum(state.live))), total

    @staticmethod
    def empty_cache() -> None:
        pass  # nothing is cached: freed device tensors return their host memory at once

    # Streams (torch.distributed.checkpoint copies to the host on the device's current stream): work on
    # the CPU is already ordered, so a stream is a handle whose waits are no-ops (Stream, below)
    @staticmethod
    def current_stream(device: Any = None) -> Any:
        return Stream(device)

    default_stream = current_stream

    @staticmethod
    def stream(stream: Any) -> Any:
        return contextlib.nullcontext(stream)

    @staticmethod
    def set_stream(stream: Any) -> None:
        pass

    class Event:
        """``torch.emu.Event``: the emulated device runs each op when it is called, so an event is
        complete when recorded and its time is the host clock's at record()."""

        def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
            self.enable_timing = enable_timing
            self._ns: int | None = None

        def record(self, stream: Any = None) -> None:
            self._ns = time.perf_counter_ns()

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            state.syncs += 1

        def wait(self, stream: Any = None) -> None:
            pass

        def elapsed_time(self, end_event: Any) -> float:
            """Milliseconds between this event's record() and `end_event`'s (as CUDA events give)."""
            return elapsed_ms(self._ns, getattr(end_event, "_ns", None),
                              self.enable_timing and getattr(end_event, "enable_timing", False))

    class device:  # torch.emu.device(i), the context manager PyTorch uses
        def __init__(self, where: Any) -> None:
            self.index = torch.device(where).index if not isinstance(where, int) else where
            self.prev = 0

        def __enter__(self) -> None:
            self.prev = state.current
            if self.index is not None:
                state.current = self.index

        def __exit__(self, *exc: Any) -> None:
            state.current = self.prev


class _Random:
    """``torch.<chip>.random``, as ``torch.cuda.random``/``torch_npu.npu.random``: transformers' Trainer saves
    and restores the chip's generator through it in every checkpoint (``torch.npu.random.get_rng_state()``)."""

    get_rng_state = staticmethod(_BackendModule.get_rng_state)
    set_rng_state = staticmethod(_BackendModule.set_rng_state)
    get_rng_state_all = staticmethod(_BackendModule.get_rng_state_all)
    set_rng_state_all = staticmethod(_BackendModule.set_rng_state_all)
    manual_seed = staticmethod(_BackendModule.manual_seed)
    manual_seed_all = staticmethod(_BackendModule.manual_seed_all)
    seed = staticmethod(_BackendModule.seed)
    seed_all = staticmethod(_BackendModule.seed_all)
    initial_seed = staticmethod(_BackendModule.initial_seed)


_BackendModule.random = _Random()  # type: ignore[attr-defined]


class Stream:
    """``torch.<chip>.Stream`` of an emulated chip: work on the CPU is already ordered, so waits are
    no-ops and synchronize() is the device's (counted as a sync)."""

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        index = device.index if isinstance(device, torch.device) else device
        self.device = torch.device(backend_name(), state.current if index is None else int(index))
        self.priority = priority

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        state.syncs += 1

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> Any:
        event = event if event is not None else _BackendModule.Event()
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __repr__(self) -> str:
        return f"<emulated Stream device={self.device}>"


def _index_of(where: Any) -> int:
    if where is None:
        return state.current
    if isinstance(where, int):
        return where
    index = torch.device(where).index
    return state.current if index is None else index


def _make_hook() -> Any:
    # PyTorch binds only these three hooks for Python backends (no generator hook: see Generator below).
    class Hook(torch._C._acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            return True

        def has_primary_context(self, dev_id: int) -> bool:
            return True

        def is_built(self) -> bool:
            return True

    return Hook()


def _make_guard() -> Any:
    # Only type_ is bound for Python guards: PyTorch counts one device (see docs/routing.md, several
    # emulated devices, for what that means for backward on emu:1 and above).
    private_use1 = torch._C._autograd.DeviceType.PrivateUse1  # (C++ asks type_ on every device op)

    class Guard(torch._C._acc.DeviceGuard):
        def type_(self) -> Any:
            return private_use1

    return Guard()
