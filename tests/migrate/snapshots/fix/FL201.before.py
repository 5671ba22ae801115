import torch


def setup(local_rank: int) -> int:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    torch.cuda.manual_seed_all(0)
    torch.cuda.manual_seed(1)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    used = torch.ones(1, device=torch.cuda.current_device()).to(torch.cuda.current_device()).numel()
    print(torch.device(torch.cuda.current_device()))
    free, total = torch.cuda.mem_get_info()
    side = torch.cuda.Stream()
    done = torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        done.record()
    return torch.cuda.device_count() + torch.cuda.current_device() + used + free + total
