"""Host synchronisations of a step, by the source line that makes them.

A chip that submits asynchronously (CUDA, Ascend, Cambricon, ...) runs ahead of the host until the host
needs a device value: ``.item()``, ``bool(t)``/``if t:``, ``nonzero`` and boolean-mask indexing (the
output's size), ``torch.equal``, a blocking copy to the host (``.cpu()``, ``.tolist()``, ``print``), or an
explicit ``synchronize()``. Each one drains the device's queue, and in a training step they are the
usual reason a chip idles. torch.profiler's events name these ops but not the line that called them
(its ``with_stack`` records Python functions, not call lines, on this torch), so `locate` runs the step
once more with a dispatch mode that sees every op on every device (real, emulated, the CPU) and a
profile hook for calls of functions named ``synchronize``, and keeps the innermost frame outside torch,
torch-fl and the standard library: the user's (or their library's) line.

On the CPU the host is the device: nothing waits, but the same lines would wait on a chip, so the
report lists them there too, saying so.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..report import Section, Table

aten = torch.ops.aten

# ops after which the host holds a device value: each waits for the device
SYNC_OPS: dict[Any, str] = {
    aten._local_scalar_dense.default: "item() (also bool(t), int(t), float(t), if t:)",
    aten.nonzero.default: "nonzero (its size; also boolean-mask indexing)",
    aten.is_nonzero.default: "bool(tensor)",
    aten.equal.default: "torch.equal",
    aten.masked_select.default: "masked_select (its size)",
    aten._unique2.default: "torch.unique (its size)",
    aten.unique_dim.default: "torch.unique(dim=) (its size)",
    aten.unique_consecutive.default: "torch.unique_consecutive (its size)",
    aten.repeat_interleave.Tensor: "repeat_interleave with tensor repeats (its size; output_size= avoids it)",
    aten.bincount.default: "bincount (its size: the input's max)",
}
COPY_OPS = (aten._to_copy.default, aten.copy_.default)
# indexing with a boolean mask computes the mask's nonzero inside the op's kernel (below any dispatch mode)
MASK_OPS = {aten.index.Tensor: "boolean-mask indexing x[mask] (its size)",
            aten.index_put_.default: "boolean-mask assignment x[mask] = v",
            aten.index_put.default: "boolean-mask assignment x[mask] = v"}
_MASKS = (torch.bool, torch.uint8)
SYNC_CALLS = frozenset({"synchronize"})  # Stream/Event/device synchronize() on every backend

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # torch_fl
_INTERNAL = (*(os.path.abspath(p) + os.sep for p in (os.path.dirname(torch.__file__), _PACKAGE,
                                                      sysconfig.get_paths()["stdlib"],
                                                      sysconfig.get_paths()["scripts"])),  # (bin/torchfl)
             os.path.join(os.path.dirname(_PACKAGE), "_torch_fl_cli.py"))  # (the torchfl launcher)
_internal_code: dict[Any, bool] = {}


def _internal(frame: FrameType) -> bool:
    code = frame.f_code
    found = _internal_code.get(code)
    if found is None:
        name = code.co_filename
        found = _internal_code[code] = name.startswith("<") or os.path.abspath(name).startswith(_INTERNAL)
    return found


def _user_line(frame: FrameType | None) -> str:
    """'file.py:LINE in function' of the innermost frame outside torch, torch-fl and the standard library;
    where every frame is theirs (an optimizer's own .item()), the innermost one, marked so."""
    innermost = frame
    while frame is not None and _internal(frame):
        frame = frame.f_back
    if frame is None:
        if innermost is None:
            return "(no Python frame)"
        frame, inside = innermost, " (torch's or torch-fl's own code)"
    else:
        inside = ""
    name = frame.f_code.co_filename
    if inside:  # the installed package's own path: torch/optim/adamw.py, not the site-packages prefix
        name = name.rpartition(f"site-packages{os.sep}")[2]
    return f"{name}:{frame.f_lineno} in {frame.f_code.co_name}{inside}"


def _on_device(value: Any, device_type: str) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == device_type


class _Locator(TorchDispatchMode):
    """Counts the sync ops whose tensors are on `device_type`, by the user's line."""

    def __init__(self, device_type: str, sites: Counter[tuple[str, str]]) -> None:
        super().__init__()
        self.device_type = device_type
        self.sites = sites

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        what = self._what(func, args, kwargs)
        if what is not None:
            self.sites[(what, _user_line(sys._getframe(1)))] += 1
        return func(*args, **kwargs)

    def _what(self, func: Any, args: tuple, kwargs: dict) -> str | None:
        what = SYNC_OPS.get(func)
        if what is not None:
            return what if args and _on_device(args[0], self.device_type) else None
        what = MASK_OPS.get(func)
        if what is not None:
            indices = args[1] if len(args) > 1 else ()
            mask = any(isinstance(i, torch.Tensor) and i.dtype in _MASKS for i in indices or ())
            return what if mask and _on_device(args[0], self.device_type) else None
        if func not in COPY_OPS or self.device_type == "cpu":
            return None
        if func is aten._to_copy.default:
            target = kwargs.get("device")
            to_host = target is not None and torch.device(target).type == "cpu"
            return "copy to the host (.cpu(), .to('cpu'), .tolist(), print)" if to_host and _on_device(
                args[0], self.device_type) else None
        dst, src = args[0], args[1]
        blocking = not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        if blocking and dst.device.type == "cpu" and _on_device(src, self.device_type):
            return "copy to the host (copy_ into a host tensor)"
        return None


def locate(step: Callable[[], Any], device: torch.device) -> list[dict[str, Any]]:
    """Run `step` once and return its host synchronisations on `device` by source line, most first:
    ``[{"what", "where", "count"}]``."""
    sites: Counter[tuple[str, str]] = Counter()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        # a Python function named synchronize called from outside torch (torch.cuda.synchronize,
        # torch.npu.synchronize, Stream.synchronize), or a C one (a vendor's binding) called from there
        if event == "call" and frame.f_code.co_name in SYNC_CALLS and frame.f_back is not None \
                and not _internal(frame.f_back):
            sites[("synchronize()", _user_line(frame.f_back))] += 1
        elif event == "c_call" and getattr(arg, "__name__", "") in SYNC_CALLS and not _internal(frame):
            sites[("synchronize()", _user_line(frame))] += 1

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        with _Locator(device.type, sites):
            step()
    finally:
        sys.setprofile(previous)
    return [{"what": what, "where": where, "count": count} for (what, where), count in sites.most_common()]


# What profile and bench (and grade, through bench) report of them ------------------------------------------
def syncs_data(sites: list[dict[str, Any]], device: torch.device) -> dict[str, Any]:
    """The JSON of a step's host syncs: ``{"per_step", "sites", "device_is_host"}``."""
    return {"per_step": sum(s["count"] for s in sites), "sites": sites, "device_is_host": device.type == "cpu"}


def syncs_line(syncs: dict[str, Any]) -> str:
    """'3 per step from 2 source lines (on the CPU nothing waits)'."""
    lines = len(syncs["sites"])
    return (f"{syncs['per_step']} per step from {lines} source line{'' if lines == 1 else 's'}"
            + (" (on the CPU nothing waits)" if syncs["device_is_host"] else ""))


def syncs_section(syncs: dict[str, Any], counted: str) -> Section:
    """The section that lists a step's host syncs by source line; `counted` says which step was looked at."""
    title = f"Host syncs per step: {syncs['per_step']}"
    if not syncs["sites"]:
        return Section(title, text=["No op of the step made the host wait for the device (no .item(), "
                                    "nonzero, blocking copy to the host or synchronize())."])
    text = ["Each waits until the device has finished everything queued before it: an asynchronous chip "
            f"idles while the host catches up. {counted}, by the innermost source line outside torch and "
            "torch-fl."]
    if syncs["device_is_host"]:
        text.append("On the CPU the host is the device and nothing waits; on a chip each of these lines would.")
    return Section(title, text=text, tables=[Table(["per step", "what", "where"],
                                                   [[s["count"], s["what"], _tail(s["where"])]
                                                    for s in syncs["sites"]])])


def _tail(where: str, width: int = 48) -> str:
    """A source line's place cut from the left, so that a narrow table keeps the file name and line
    (the JSON keeps the whole path)."""
    return where if len(where) <= width else "…" + where[-(width - 1):]
