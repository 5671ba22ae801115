import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def place(x: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    model.to(torch.fl.device("acc1"))
    y = torch.zeros(4, device=torch.fl.device("acc0"))
    dev = torch.fl.device("acc0")
    return x.to(torch.fl.device("acc0")) + y.to(dev)
