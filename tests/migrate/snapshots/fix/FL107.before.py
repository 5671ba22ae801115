"""FL107 (unsafe): config defaults naming CUDA, read by code elsewhere."""
from dataclasses import dataclass, field

_C = CN()
_C.MODEL = CN()
_C.MODEL.DEVICE = "cuda"


@dataclass
class TrainConfig:
    device: str = "cuda"
    eval_device: str = field(default="cuda:0")
