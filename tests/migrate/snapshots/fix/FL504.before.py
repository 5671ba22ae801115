"""FL504 (unsafe): a config default naming the NCCL backend, read by code elsewhere."""
from dataclasses import dataclass


@dataclass
class DistributedConfig:
    distributed_backend: str = "nccl"
