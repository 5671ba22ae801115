"""Device descriptions: the TOML schema, loader, registry, probe and the built-in chips.

``torch.fl.description`` is this package, and calling it returns a description (torch_fl/__init__.py
makes it callable, since asking which description governs the default device is the device layer's), so
both ``torch.fl.description("npu")`` and ``import torch_fl.description.registry as r`` work. Submodules
load on first use.
"""

from __future__ import annotations
