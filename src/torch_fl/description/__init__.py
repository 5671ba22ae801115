"""Device descriptions: the TOML schema, loader, registry, probe and the built-in chips.

``torch.fl.description`` is this package, and calling it returns a description, so both
``torch.fl.description("npu")`` and ``import torch_fl.description.registry as r`` work (a function bound
under the package's name would shadow it for ``import ... as``). Submodules load on first use.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Description


def describe(name: str | None = None) -> Description:
    """A device description by name or path; with no name, the description of torch.fl.device().

    Raises:
        UnknownDescriptionError: for a name no description has (with the closest names).

    Example:
        >>> torch.fl.description("cpu").device_type
        'cpu'
    """
    if name:
        from .registry import get

        return get(name)
    from ..device import governing

    return governing()


class _CallableModule(types.ModuleType):
    def __call__(self, name: str | None = None) -> Description:
        return describe(name)


sys.modules[__name__].__class__ = _CallableModule
