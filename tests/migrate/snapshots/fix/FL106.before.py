import torch


def place(x: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    model.to(1)
    y = torch.zeros(4, device=0)
    dev = torch.device(0)
    return x.to(0) + y.to(dev)
