"""FL504 (unsafe): a config default naming the NCCL backend, read by code elsewhere."""
from dataclasses import dataclass
import torch
import torch_fl  # noqa: F401  (installs torch.fl)


@dataclass
class DistributedConfig:
    distributed_backend: str = torch.fl.dist_backend()
