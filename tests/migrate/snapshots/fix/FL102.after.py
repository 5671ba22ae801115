"""FL102: .cuda() on tensors and modules."""
import torch
from torch import nn
import torch_fl  # noqa: F401  (installs torch.fl)


def run(batch, local_rank):
    model = nn.Linear(4, 4).to(torch.fl.device())
    inputs = batch.to(torch.fl.device(), non_blocking=True)
    pinned = batch.to(torch.fl.device("acc1"))
    ranked = batch.cuda(local_rank)  # one device per rank
    both = batch.to(torch.fl.device("acc0"), non_blocking=True)
    return model(inputs), pinned, ranked, both, torch.zeros(1).to(torch.fl.device()).to(torch.fl.device())
