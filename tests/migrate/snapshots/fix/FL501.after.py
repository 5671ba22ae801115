import torch.distributed as dist
import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def init(rank: int, world: int) -> None:
    dist.init_process_group(torch.fl.dist_backend(), rank=rank, world_size=world)
    dist.new_group([0, 1], backend=torch.fl.dist_backend())
