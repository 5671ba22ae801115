"""FL107 (unsafe): config defaults naming CUDA, read by code elsewhere."""
from dataclasses import dataclass, field
import torch
import torch_fl  # noqa: F401  (installs torch.fl)

_C = CN()
_C.MODEL = CN()
_C.MODEL.DEVICE = torch.fl.device_type()


@dataclass
class TrainConfig:
    device: str = torch.fl.device_type()
    eval_device: str = field(default=str(torch.fl.device("acc0")))
