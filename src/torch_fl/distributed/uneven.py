"""Uneven chips, one answer: ranks take shares of the global batch in proportion to their throughput,
and each scales its loss so that data parallelism still computes the full-batch step.

The arithmetic. A step over a global batch of N samples wants the gradient of the mean loss,
``(1/N) * sum_i l_i``. Rank r computes the mean loss L_r over its n_r samples; DDP (and FSDP2's
reduce-scatter) average the ranks' gradients, dividing their sum by the world size W. So each rank
multiplies its loss by ``s_r = W * n_r / N``::

    (1/W) * sum_r grad(s_r * L_r) = sum_r (n_r / N) * grad(L_r) = grad((1/N) * sum_i l_i)

which is the full-batch gradient whatever the shares (equal shares give s_r = 1). Shares follow each
rank's throughput (samples per second, measured on that rank or configured), rounded by largest
remainder so that they sum to N, with at least one sample per rank.

    split = torch.fl.distributed.uneven_split(global_batch=96, throughput=measured_samples_per_s)
    loader = DataLoader(data, batch_sampler=split.sampler(len(data), seed=0))
    loss = criterion(model(x), y) * split.loss_scale
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import DistributedError


@dataclass(frozen=True)
class UnevenSplit:
    """This rank's share of each global batch and the loss scale that keeps the step full-batch."""

    shares: list[int]  # samples per rank, in rank order; they sum to global_batch
    rank: int

    @property
    def global_batch(self) -> int:
        return sum(self.shares)

    @property
    def share(self) -> int:
        return self.shares[self.rank]

    @property
    def start(self) -> int:
        """Where this rank's samples begin within a global batch."""
        return sum(self.shares[: self.rank])

    @property
    def loss_scale(self) -> float:
        """W * n_r / N: multiply this rank's mean loss by it (the module docstring has the arithmetic)."""
        return len(self.shares) * self.share / self.global_batch

    def sampler(self, dataset_size: int, *, seed: int = 0, shuffle: bool = True,
                drop_last: bool = True) -> UnevenBatchSampler:
        """A batch sampler for torch.utils.data.DataLoader(batch_sampler=...): this rank's share of each
        global batch of one permutation that every rank draws alike."""
        return UnevenBatchSampler(self, dataset_size, seed=seed, shuffle=shuffle, drop_last=drop_last)


class UnevenBatchSampler:
    """Yields this rank's indices of each global batch; call set_epoch(n) per epoch for a new order."""

    def __init__(self, split: UnevenSplit, dataset_size: int, *, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = True) -> None:
        if dataset_size < split.global_batch and drop_last:
            raise ValueError(f"UnevenBatchSampler: the dataset has {dataset_size} samples, fewer than one "
                             f"global batch ({split.global_batch}); with drop_last=True no batch is left. "
                             "Fix: a smaller global batch, or drop_last=False.")
        self.split, self.size, self.seed, self.shuffle, self.drop_last = split, dataset_size, seed, shuffle, drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.size))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.size, generator=generator).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        order, n, start = self._order(), self.split.global_batch, self.split.start
        for begin in range(0, len(order), n):
            batch = order[begin:begin + n]
            if len(batch) < n and self.drop_last:
                return
            mine = batch[start:start + self.split.share]
            if mine:
                yield mine

    def __len__(self) -> int:
        n = self.split.global_batch
        return self.size // n if self.drop_last else math.ceil(self.size / n)


def shares_for(global_batch: int, throughputs: Sequence[float]) -> list[int]:
    """Samples per rank in proportion to `throughputs`, summing to `global_batch`, at least 1 each
    (largest remainder: the ranks with the biggest fractional parts get the samples left over)."""
    world = len(throughputs)
    bad = [r for r, t in enumerate(throughputs) if not (math.isfinite(t) and t > 0)]
    if bad:
        raise DistributedError(f"uneven_split: throughput must be a positive number of samples per second; "
                               f"rank {bad[0]} gave {throughputs[bad[0]]!r}. Fix: measure a few steps on that "
                               "rank, or pass the configured figure.")
    if global_batch < world:
        raise DistributedError(f"uneven_split: a global batch of {global_batch} cannot give each of the "
                               f"{world} ranks a sample. Fix: a global batch of at least {world}.")
    total = sum(throughputs)
    spare = global_batch - world  # one sample per rank first, the rest by throughput
    exact = [spare * t / total for t in throughputs]
    shares = [1 + math.floor(e) for e in exact]
    left = global_batch - sum(shares)
    for r in sorted(range(world), key=lambda r: (-(exact[r] - math.floor(exact[r])), r))[:left]:
        shares[r] += 1
    return shares


def uneven_split(global_batch: int, throughput: float, group: dist.ProcessGroup | None = None) -> UnevenSplit:
    """Every rank passes its own throughput (samples/s); all get the same shares (a collective: call it
    on every rank of `group`, default the whole job)."""
    if not dist.is_initialized():
        raise DistributedError("uneven_split needs the process group: call "
                               "torch.fl.distributed.init_process_group() first.")
    gathered: list[float | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, float(throughput), group=group)
    return UnevenSplit(shares_for(global_batch, [float(t) for t in gathered]), dist.get_rank(group))
