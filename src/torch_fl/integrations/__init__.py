"""The frameworks people train with, on torch.fl.device() (docs/frameworks.md).

- :mod:`torch_fl.integrations.lightning`: a PyTorch Lightning ``Accelerator`` named ``"torchfl"``
  (``Trainer(accelerator="torchfl")``), registered when the module is imported.
- :mod:`torch_fl.integrations.huggingface`: :func:`~torch_fl.integrations.huggingface.use_fl_device`
  makes HF accelerate's ``Accelerator()`` and transformers' ``Trainer`` pick torch.fl.device() through
  accelerate's own ``ACCELERATE_TORCH_DEVICE`` setting.

Each framework is an optional dependency: it is imported by its integration module only, never by
``import torch_fl`` or by this package.
"""

from __future__ import annotations

__all__: list[str] = []
