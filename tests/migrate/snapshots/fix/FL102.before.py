"""FL102: .cuda() on tensors and modules."""
import torch
from torch import nn


def run(batch, local_rank):
    model = nn.Linear(4, 4).cuda()
    inputs = batch.cuda(non_blocking=True)
    pinned = batch.cuda(1)
    ranked = batch.cuda(local_rank)  # one device per rank
    both = batch.cuda(0, True)
    return model(inputs), pinned, ranked, both, torch.zeros(1).cuda().cuda()
