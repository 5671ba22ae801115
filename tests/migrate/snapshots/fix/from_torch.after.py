"""Only `from torch import ...`: the fix adds `import torch` for torch.fl."""
from torch import nn, zeros
import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def build():
    return nn.Linear(2, 2).to(torch.fl.device()), zeros(2, device=torch.fl.device())
