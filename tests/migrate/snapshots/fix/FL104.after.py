import torch
import torch_fl  # noqa: F401  (installs torch.fl)

torch.set_default_device(torch.fl.device())
torch.set_default_device(torch.fl.device("acc2"))
