"""FL101: "cuda" device literals."""

import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def make(rank: int):
    dev = torch.fl.device()  # the training device
    second = torch.device('cuda:1')
    by_index = torch.device("cuda", rank)
    x = torch.zeros(3, device=torch.fl.device())
    y = torch.ones(
        2,
        device=torch.fl.device("acc0"),   # keeps this comment
    )
    z = x.to(torch.fl.device(), non_blocking=True)
    w = torch.empty(1, device=f"cuda:{rank}")
    return dev, second, by_index, x, y, z, w
