"""The runtime CUDA alias: unmodified CUDA-hard-coded code runs on ``torch.fl.device()``.

    with torch_fl.migrate.cuda_alias():      # or a = cuda_alias(); a.enable(); ...; a.disable()
        runpy.run_path("train.py", run_name="__main__")

``torchfl run train.py`` and ``FL_CUDA_ALIAS=1 python train.py`` (the ``torch.backends`` autoload hook,
see autoload.py) do the same for a whole process. docs/migrate-runtime.md is the user documentation.

What CUDA code asks for, and where it goes ("the target" is ``torch.fl.device()``, or the device given):

- a CUDA device argument -- ``"cuda"``, ``"cuda:N"``, ``torch.device("cuda", N)``, an integer ordinal
  (``device=N``, ``Tensor.to(N)``, ``Module.to(rank)``) -- of any torch function (factories,
  ``Tensor.new_*``, ...), of ``Tensor.to``, ``Module.to``, ``torch.set_default_device``,
  ``torch.Generator`` and ``torch.load(map_location=...)`` (str, int, device, dict, callable; and CUDA
  storages in a checkpoint): ``"cuda"`` is the target, ``"cuda:N"`` and N are the N-th virtual device
  ``accN`` (every index is the target when the target has no index, as the host CPU);
  ``torch.device(N)`` itself is ``cuda:N`` (device objects stay CUDA, below);
- ``Tensor.cuda``, ``Module.cuda``, ``Storage.cuda``: ``.to(target)``; ``Tensor.pin_memory``: a no-op on a
  host target; legacy CUDA type names (``Tensor.type``, ``set_default_tensor_type``): their dtype on the
  target;
- ``torch.cuda.*``: what the CUDA-API table (cuda_api.py) says per entry: a handler of
  ``cuda_surface.CudaAPI`` named by the entry's ``alias`` (the torch.fl facade, or an answer from the
  description, listed in the alias report), a refusal (``alias_refuses``: CUDA graphs), or the original,
  whose failure is re-raised as a ``CudaAliasError`` naming the alias and the entry's remedy;
- ``torch.autocast("cuda")``, ``torch.amp.autocast``, ``torch.cuda.amp.autocast``: autocast on the
  target's type, in the requested dtype when the target's description lists it, else (or when none was
  requested) in the description's autocast dtype; ``torch.amp.GradScaler("cuda")`` and
  ``torch.cuda.amp.GradScaler``: a GradScaler for the target's type;
- ``"nccl"`` given to ``torch.distributed.init_process_group`` / ``new_group``: the description's
  collective backend (``torch.fl.dist_backend()``); ``DistributedDataParallel(device_ids=[N])``: the
  mapped devices, none for a host target (DDP takes no device ids for CPU modules).

Device *objects* stay what the code built: ``torch.device("cuda")`` is still a CUDA device, rewritten
where it is used. The code's string tests (``"cuda" in device``) cannot be aliased, so keeping device
objects CUDA makes every branch take the same (GPU) path. ``torch.cuda.is_available()`` is
``torch.fl.is_available()`` (True for the host) for the same reason: code gated on it must take its GPU
path to run on the target. The price: ``tensor.device == torch.device("cuda")`` and ``tensor.is_cuda``
are False.

Mechanism, and why:

- Device arguments of torch functions: a ``TorchFunctionMode``. Every torch function, method and
  factory (and ``torch.device`` itself) passes through it, including calls captured before the alias
  was enabled (``from torch import zeros``); a call without a CUDA argument costs one Python call and a
  scan of its arguments. Patching each factory instead would miss the ones not listed and the ones
  imported by name. A mode is per thread: it covers the thread that enabled the alias (and autograd).
- Everything else is Python attributes, patched in place and restored exactly (the original objects,
  or the inherited attribute deleted again): ``torch.Tensor.{to,cuda,pin_memory}``,
  ``torch.nn.Module.{to,cuda}`` and the entry points named above. These are process-wide, so
  ``.to("cuda")`` works in every thread. ``torch.device`` cannot be patched (a C type, checked with
  isinstance everywhere) and does not need to be: the mode and the patched entry points rewrite it.
- ``torch.cuda`` stays the real module; its public functions are replaced one by one. A replaced
  function answers for torch.fl only when called from outside torch and torch-fl: torch's own feature
  checks (``torch.cuda.is_available()`` in DataLoader, ``torch.manual_seed`` seeding CUDA) keep
  seeing the truth. Functions without a torch.fl counterpart run as they are (and are logged).
- Requests torch-fl makes itself (directly or through torch) are left alone: its analyses name
  devices on purpose (``FL_CUDA_ALIAS=1 torchfl coverage --device cuda`` must still mean CUDA).

Never active when the target is real CUDA (device type ``cuda``, ROCm included): enabling is then a
no-op, logged once. Each aliased call site is logged once at INFO on ``torch_fl.migrate``
(``FL_LOG=migrate=INFO``) with the file:line of the first frame outside torch and torch-fl.

Thread safety: enable/disable are serialized by a lock and only one alias is active per process.
disable() must run on the thread that called enable() (the mode lives on that thread's mode stack),
after any TorchFunctionMode entered later has exited. Other threads get the process-wide patches but
not the mode: a factory with ``device="cuda"`` in a worker thread is not rewritten.

Not covered: ``tensor.is_cuda`` (False), custom CUDA extensions and libraries built for CUDA only. torch.compile of aliased code works; its graphs break at
the patched Python entry points (``.to``, ``.cuda()``, ...), which Dynamo warns about.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from .._mode_exit import EnteredMode
from ..device import description_for, device_map, is_emulated
from ..errors import DeviceNotFoundError
from . import patches
from .alias_calls import (
    CUDA,
    DeviceMode,
    DeviceRequest,
    Mapped,
    Recorder,
    Site,
    from_torch_fl,
    has_cuda,
    is_cuda,
    is_device,
    is_internal,
    is_ordinal,
    log,
    user_frame,
)

__all__ = ["CudaAlias", "DeviceRequest", "Site", "active", "cuda_alias"]

# The alias ---------------------------------------------------------------------------------------
@dataclass
class _Patch:
    owner: Any
    name: str
    original: Any
    owned: bool  # the attribute was in owner.__dict__ (else inherited: deleted again on restore)


_state_lock = threading.Lock()
_active: CudaAlias | None = None


class CudaAlias:
    """Makes CUDA-hard-coded code run on a torch.fl device; a context manager, or enable()/disable().

    Args:
        device: the target (default torch.fl.device(): FL_DEVICE, the config, else acc0).
        recorder: called with a DeviceRequest for every CUDA request and every device request made
            directly by user code (torchfl audit); None (the default) keeps the hot path to a check.

    Example:
        >>> with cuda_alias("cpu"):
        ...     x = torch.ones(2, device="cuda") * 2
        >>> x.device
        device(type='cpu')
    """

    def __init__(self, device: str | int | torch.device | None = None, *, recorder: Recorder | None = None):
        self._device = device
        self.recorder = recorder
        self._target: torch.device | None = None
        self._devices: list[torch.device] | None = None
        self._patches: list[_Patch] = []
        self._mode: EnteredMode | None = None  # the DeviceMode, on the enabling thread
        self._thread: int | None = None
        self._logged: set[tuple[Site, str]] = set()
        self.wrappers: set[Callable[..., Any]] = set()  # patched Tensor methods the mode may be handed
        self._lock = threading.Lock()
        self.enabled = False
        # Queries answered from the description and CUDA settings accepted without effect, with counts:
        # the alias report (`torchfl run --report`).
        self.answers: collections.Counter[tuple[str, str]] = collections.Counter()

    # Target ---------------------------------------------------------------------------------------
    @property
    def target(self) -> torch.device:
        """The device CUDA requests run on (resolved on first use, as torch.fl.device(): that activates routing)."""
        if self._target is None:
            with self._lock:
                if self._target is None:
                    from ..routing.current import use_device

                    target = use_device(self._device)
                    if target.type == CUDA:
                        log.info("the CUDA alias does nothing: the target %s is a real CUDA device", target)
                    self._target = target
        return self._target

    def bypass(self, caller: FrameType | None) -> bool:
        """Leave a CUDA request alone: the target is CUDA itself, or torch-fl made the request."""
        return self.real_cuda or from_torch_fl(caller)

    @property
    def real_cuda(self) -> bool:
        """True when the target is CUDA itself: every entry point then behaves as the original."""
        return self.target.type == CUDA

    def map_device(self, value: Any) -> torch.device:
        """The device a CUDA device argument runs on: 'cuda' -> the target, 'cuda:N' or N -> accN (the
        target itself when it has no index, as the host CPU)."""
        if isinstance(value, torch.device):
            index = value.index
        elif isinstance(value, str):
            index = torch.device(value).index
        else:
            index = int(value)
        if index is not None and index < 0:
            raise DeviceNotFoundError(
                f"the CUDA code asks for device ordinal {index}: device ordinals count from 0 (the alias "
                f"maps {CUDA}:N and the ordinal N to accN)")
        target = self.target
        if target.type == CUDA:
            return torch.device(CUDA, index)  # real CUDA: nothing to alias
        if index is None or target.index is None:
            return target
        if self._devices is None:
            self._devices = list(device_map().values())  # acc0, acc1, ...
        if index < len(self._devices):
            return self._devices[index]
        more = (f"emulate more devices with FL_EMU_DEVICES={index + 1}" if is_emulated(target)
                else "map more devices with FL_DEVICE_MAP")
        raise DeviceNotFoundError(
            f"the CUDA code asks for {CUDA}:{index}, but this machine has only {len(self._devices)} "
            f"virtual device(s) ({', '.join(f'acc{i} -> {d}' for i, d in enumerate(self._devices))}), "
            f"and the alias maps {CUDA}:N to accN. Run fewer processes per machine or {more}.")

    def map_any(self, device: Any) -> torch.device:
        """A device argument of a torch.cuda call: None is the target, CUDA names and ordinals map."""
        if device is None:
            return self.target
        if is_cuda(device) or is_ordinal(device):
            return self.map_device(device)
        return device if isinstance(device, torch.device) else torch.device(device)

    def map_args(self, args: tuple, kwargs: dict, caller: FrameType | None,
                  ordinal_first: bool = False) -> tuple[tuple, dict, Mapped | None]:
        """args and kwargs with CUDA device arguments mapped, and the first device argument seen
        (None when the call carried none, or when `caller` is torch-fl's own code). `ordinal_first`:
        an int first positional argument is a device ordinal (``Tensor.to(0)``, ``Module.to(rank)``)."""
        if self.recorder is None and not has_cuda(args, kwargs, ordinal_first):
            return args, kwargs, None
        if self.bypass(caller):
            return args, kwargs, None
        mapped: Mapped | None = None
        if ordinal_first and args and is_ordinal(args[0]):
            first = self.map_device(args[0])
            mapped = Mapped(args[0], first, True)
            args = (first, *args[1:])
        if any(is_cuda(a) for a in args):
            new_args = list(args)
            for i, value in enumerate(args):
                if is_cuda(value):
                    new_args[i] = self.map_device(value)
                    mapped = mapped or Mapped(value, new_args[i], True)
            args = tuple(new_args)
        elif self.recorder is not None:
            first = next((a for a in args if is_device(a)), None)
            mapped = Mapped(first, first, False) if first is not None else None
        device = kwargs.get("device")
        if device is not None:
            if is_cuda(device) or is_ordinal(device):
                kwargs = {**kwargs, "device": self.map_device(device)}
                mapped = mapped or Mapped(device, kwargs["device"], True)
            elif mapped is None and self.recorder is not None:
                mapped = Mapped(device, device, False)
        if kwargs.get("device_type") == CUDA:
            kwargs = {**kwargs, "device_type": self.target.type}
            mapped = mapped or Mapped(CUDA, self.target.type, True)
        return args, kwargs, mapped

    def map_plain(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """map_args without caller, bypass or record: what torch.compile can trace."""
        args = tuple(self.map_device(a) if is_cuda(a) else a for a in args)
        device = kwargs.get("device")
        if device is not None and (is_cuda(device) or is_ordinal(device)):
            kwargs = {**kwargs, "device": self.map_device(device)}
        if kwargs.get("device_type") == CUDA:
            kwargs = {**kwargs, "device_type": self.target.type}
        return args, kwargs

    def host_memory(self) -> bool:
        return description_for(self.target).section("memory")["allocator"] == "host"

    # Logging and recording --------------------------------------------------------------------------
    def answered(self, query: str, answer: Any) -> None:
        """Record a query answered from the description (or a setting accepted) for the report; the
        first of each is logged at INFO (FL_LOG=migrate=INFO), for runs without `torchfl run --report`."""
        key = (query, str(answer))
        if key not in self.answers:
            log.info("%s answered by the CUDA alias: %s", query, key[1])
        self.answers[key] += 1

    def report(self) -> str:
        """What the alias answered in place of CUDA: each query, its answer and how often."""
        target = self._target if self._target is not None else "(not resolved: no CUDA request was made)"
        lines = [f"CUDA alias report (target {target})"]
        if not self.answers:
            lines.append("  no query was answered from the description, no CUDA setting was made")
        for (query, answer), count in sorted(self.answers.items()):
            lines.append(f"  {query} -> {answer}  ({count}x)")
        return "\n".join(lines)

    def note(self, call: str, mapped: Mapped, caller: FrameType | None) -> None:
        """Log a CUDA request once per (site, call); record it, and user-made requests, for audits."""
        if self.real_cuda:
            return
        direct = caller is not None and not is_internal(caller.f_code.co_filename)
        if not mapped.cuda and not (direct and self.recorder is not None):
            return
        frame = user_frame(caller)
        site = Site(frame.f_code.co_filename, frame.f_lineno) if frame is not None else Site("<unknown>", 0)
        if self.recorder is not None:
            self.recorder(DeviceRequest(site, call, mapped.requested, mapped.resolved, mapped.cuda))
        if mapped.cuda and (site, call) not in self._logged:
            self._logged.add((site, call))
            log.info("%s: %s(%s) runs on %s", site, call, mapped.requested, mapped.resolved)

    # Enable / disable -------------------------------------------------------------------------------
    def enable(self, *, resolve_now: bool = True) -> CudaAlias:
        """Install the alias for this process (see the module docstring for what and how).

        Args:
            resolve_now: resolve the target now (and do nothing when it is real CUDA). False defers it
                to the first CUDA request: the autoload hook runs inside ``import torch``, too early to
                activate routing.

        Raises:
            RuntimeError: when another alias is active.
        """
        global _active
        with _state_lock:
            if self.enabled:
                return self
            if _active is not None:
                raise RuntimeError("a CUDA alias is already active in this process (FL_CUDA_ALIAS=1, "
                                   "`torchfl run` or another cuda_alias()); disable it first")
            if not (resolve_now and self.real_cuda):
                try:
                    self._install()
                    self._mode = EnteredMode(DeviceMode, self)
                except BaseException:
                    self._restore()
                    raise
                self._thread = threading.get_ident()
            self.enabled = True
            _active = self
        return self

    def disable(self) -> None:
        """Restore every patched attribute (the original objects) and leave the mode."""
        global _active
        with _state_lock:
            if not self.enabled:
                return
            if self._mode is not None:
                if threading.get_ident() != self._thread:
                    raise RuntimeError("disable the CUDA alias on the thread that enabled it (its "
                                       "TorchFunctionMode is on that thread's mode stack)")
                if not self._mode.on_top():
                    raise RuntimeError("a TorchFunctionMode entered after the CUDA alias is still active; "
                                       "exit it before disabling the alias")
                self._mode.exit()  # and waits for gloo's workers to drop their copies of it
                self._mode = None
            self._restore()
            self.enabled = False
            _active = None

    def __enter__(self) -> CudaAlias:
        return self.enable()

    def __exit__(self, *exc: object) -> None:
        self.disable()

    def patch(self, owner: Any, name: str, replacement: Any) -> None:
        """Set owner.name to replacement until disable() (which restores exactly what was there)."""
        owned = name in vars(owner)
        original = vars(owner)[name] if owned else None
        self._patches.append(_Patch(owner, name, original, owned))
        setattr(owner, name, replacement)

    def patched(self, owner: Any) -> bool:
        return any(patch.owner is owner for patch in self._patches)

    def _restore(self) -> None:
        self.wrappers.clear()
        while self._patches:
            patch = self._patches.pop()
            if patch.owned:
                setattr(patch.owner, patch.name, patch.original)
            else:
                delattr(patch.owner, patch.name)

    def _install(self) -> None:
        patches.install_all(self)


def cuda_alias(device: str | int | torch.device | None = None, *, recorder: Recorder | None = None) -> CudaAlias:
    """The CUDA alias for `device` (default torch.fl.device()): ``with cuda_alias(): ...`` or
    ``a = cuda_alias(); a.enable(); ...; a.disable()``. See CudaAlias and the module docstring."""
    return CudaAlias(device, recorder=recorder)


def active() -> CudaAlias | None:
    """The alias enabled in this process, if any."""
    return _active


@contextlib.contextmanager
def suspended():
    """Disable the active alias (if any) for a block, and enable it again after."""
    current = _active
    if current is None:
        yield None
        return
    current.disable()
    try:
        yield current
    finally:
        current.enable(resolve_now=current._target is not None)
