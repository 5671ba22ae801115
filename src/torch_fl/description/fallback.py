"""What a vendor's stack does with an op it has no kernel for: the one place that reads
``ops.vendor_fallback``, ``ops.vendor_fallback_env`` and ``ops.vendor_fallback_message``.

PyTorch's dispatcher takes, for a backend key, the op's own kernel, else a composite kernel
(CompositeExplicitAutogradNonFunctional, CompositeExplicitAutograd, CompositeImplicitAutograd), else the
key's *backend fallback*. A vendor plugin may register a boxed CPU fallback there, which copies the inputs
to the host, runs the CPU kernel (``at::native::cpu_fallback``) and copies the results back:

- torch_npu: ``npu_cpu_fallback`` on PrivateUse1 (Ascend/pytorch torch_npu/csrc/aten/VariableFallbackKernel.cpp,
  in v2.1.0 82f7ccc, v2.5.1 5d1912e and master 9e73e70): "CAUTION: The operator '...' is not currently
  supported on the NPU backend and will fall back to run on the CPU." Since 2026-08 (master f2e1583,
  branches v2.7.1 and v2.9.0) ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` turns it into an error
  (torch_npu/csrc/core/npu/register/OptionsManager.cpp, IsCpuFallbackEnable).
- torch_mlu: ``mlu_fallback`` on PrivateUse1 (Cambricon/torch_mlu torch_mlu/csrc/aten/MLUFallback.cpp,
  d578002), unless ``ENABLE_FALLBACK_TO_CPU`` is ``0``/``OFF``/``off``, which registers
  ``mlu_disable_fallback`` (an error) instead.
- torch-xpu-ops: an explicit list of ops registered to ``xpu_fallback`` (the route=fallback rows of
  tables/xpu.txt); every other missing op is an error unless ``PYTORCH_ENABLE_XPU_FALLBACK`` is a nonzero
  number (intel/torch-xpu-ops src/ATen/native/xpu/XPUFallback.cpp, ab84f92).

The route table (routing/table.py) asks :func:`vendor_fallback` once per table; the emulated chip and
coverage take its routes, so the three agree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._env import FALSE, TRUE

if TYPE_CHECKING:
    from .model import Description


def truth(text: str) -> bool | None:
    """The boolean a vendor switch's value means: torch-fl's vocabulary (1/true/yes/on, 0/false/no/off,
    any case) and, as torch-xpu-ops and torch_npu parse them, other integers (nonzero is true);
    None: no boolean."""
    word = text.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    try:
        return int(word) != 0
    except ValueError:
        return None


def parse_switch(text: str) -> tuple[str, bool] | None:
    """'NAME=VALUE' -> (NAME, truth of VALUE); None when it is not of that form."""
    name, sep, value = text.partition("=")
    name = name.strip()
    meaning = truth(value) if sep else None
    if not name or meaning is None or not name.replace("_", "").isalnum():
        return None
    return name, meaning


@dataclass(frozen=True)
class VendorFallback:
    """The vendor's behaviour for ops without a kernel, as the environment sets it now."""

    on: bool          # the vendor's stack runs such ops on the CPU
    default: str      # ops.vendor_fallback as described ('cpu' or 'error')
    switch: str       # ops.vendor_fallback_env ('' = none)
    flipped: bool     # the switch is set, so `on` is the opposite of the default
    message: str      # ops.vendor_fallback_message, '{op}' for the operator
    stack: str        # who falls back: the plugin, or 'the NAME backend' for one built into torch

    def key(self) -> tuple[bool, bool]:
        """What a cached route table depends on."""
        return self.on, self.flipped

    def setting(self) -> str:
        """Where the current behaviour comes from, for reasons and errors."""
        where = f"ops.vendor_fallback = '{self.default}'"
        if self.flipped:
            return f"{where}, flipped by {self.switch} in the environment"
        return where

    def says(self, op: str) -> str:
        """The vendor's own warning for dispatcher op name `op` ('' when the description quotes none)."""
        return self.message.replace("{op}", op) if self.message else ""

    def reason(self, op: str, through: str | None = None) -> str:
        """Why `op` runs on the CPU: the vendor's fallback, in its own words. `through`: the out= overload
        the op's generated forwarder calls, which is what reaches the fallback."""
        via = f" through {through}" if through else ""
        said = self.says(through or op)
        return (f"{self.setting()}: {self.stack} has no kernel for it and runs it on the CPU itself{via} (the "
                f"vendor's CPU fallback" + (f': "{said}"' if said else "") + ")")

    def off_hint(self) -> str:
        """How to turn the vendor's fallback on, where a switch does ('' when none)."""
        if self.on or not self.switch:
            return ""
        name, value = parse_switch(self.switch) or (self.switch, True)
        if self.flipped:
            return f"unset {name} (it turns off the CPU fallback of {self.stack})"
        return f"set {name}={'1' if value else '0'} (the CPU fallback of {self.stack} for every op it lacks)"


def vendor_fallback(desc: Description, environ: Mapping[str, str] | None = None) -> VendorFallback:
    """`desc`'s vendor fallback under `environ` (default: this process's environment)."""
    ops = desc.section("ops")
    default, switch = ops.get("vendor_fallback", "error"), ops.get("vendor_fallback_env", "")
    flipped = False
    parsed = parse_switch(switch) if switch else None
    if parsed is not None:
        name, meaning = parsed
        value = (os.environ if environ is None else environ).get(name, "").strip()
        flipped = bool(value) and truth(value) == meaning
    on = (default == "cpu") != flipped
    return VendorFallback(on, default, switch, flipped, ops.get("vendor_fallback_message", ""),
                          desc.plugin or f"the {desc.name} backend")


__all__ = ["VendorFallback", "parse_switch", "truth", "vendor_fallback"]
