"""FL101: "cuda" device literals."""

import torch


def make(rank: int):
    dev = torch.device("cuda")  # the training device
    second = torch.device('cuda:1')
    by_index = torch.device("cuda", rank)
    x = torch.zeros(3, device="cuda")
    y = torch.ones(
        2,
        device="cuda:0",   # keeps this comment
    )
    z = x.to("cuda", non_blocking=True)
    w = torch.empty(1, device=f"cuda:{rank}")
    return dev, second, by_index, x, y, z, w
