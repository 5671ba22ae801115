"""``FL_CUDA_ALIAS=1 python train.py``: the CUDA alias for a script that never imports torch_fl.

torch (>= 2.5) calls every ``torch.backends`` entry point while ``import torch`` runs
(``torch._import_device_backends``; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off); torch-fl
registers ``_torch_fl_alias.autoload`` there, which checks the variable and only then imports this
module: with the variable unset, ``import torch`` does not import torch_fl at all.
"""

from __future__ import annotations

from .. import _env


def autoload() -> None:
    """Enable the CUDA alias for this process when FL_CUDA_ALIAS is set (torch.backends entry point).

    Raises:
        ConfigError: FL_CUDA_ALIAS is neither on nor off (the env layer names the allowed values).
    """
    if not _env.FL_CUDA_ALIAS.value():
        return
    from ..device import resolve_spec
    from .alias import active, cuda_alias

    if active() is not None:
        return
    # Called halfway through `import torch`: resolving the target fully would activate operator
    # routing before torch has registered its own kernels, so only the device type is looked up here
    # (nothing to do on real CUDA) and the alias resolves, and routes, on the first CUDA request.
    if resolve_spec(None).device.type == "cuda":
        return
    cuda_alias().enable(resolve_now=False)
