import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def setup(local_rank: int) -> int:
    if torch.fl.is_accelerator():
        torch.fl.set_device(local_rank)
    torch.cuda.manual_seed_all(0)
    torch.cuda.manual_seed(1)
    torch.fl.empty_cache()
    torch.fl.reset_peak_memory_stats()
    used = torch.ones(1, device=torch.fl.device()).to(torch.fl.device()).numel()
    print(torch.device(torch.fl.device()))
    free, total = torch.fl.mem_get_info()
    side = torch.fl.Stream()
    done = torch.fl.Event(enable_timing=True)
    with torch.fl.stream(side):
        done.record()
    return torch.cuda.device_count() + torch.fl.current_device() + used + free + total
