# A snippet that never imports torch (a notebook cell): the scanner takes `torch` as torch.
import torch
import torch_fl  # noqa: F401  (installs torch.fl)

x = torch.zeros(1).to(torch.fl.device())  # noqa: F821
