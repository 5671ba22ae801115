"""The vendor's CUDA-to-chip migration switch of an emulated plugin chip, as torch-fl's CUDA alias.

``import torch_npu.contrib.transfer_to_npu`` (Ascend) and ``import torch_mlu.utils.gpu_migration``
(Cambricon) patch ``torch.cuda``, ``"cuda"`` devices and nccl onto the vendor's chip. Under emulation
(description key ``emulation.plugin_migration``) the emulated plugin's finder (routing/emu/plugin.py)
runs this file under that module name, and importing it turns on torch-fl's CUDA alias for the process,
which does the same for the resolved (emulated) device: docs/migrate-runtime.md.

This file is executed under the vendor's module name, so it imports absolutely.
"""

import logging

from torch_fl.migrate.alias import active, cuda_alias

if active() is None:
    cuda_alias().enable()
logging.getLogger("torch_fl.migrate").info(
    "%s: CUDA calls and devices now run on the emulated chip (torch-fl's CUDA alias)", __name__)
