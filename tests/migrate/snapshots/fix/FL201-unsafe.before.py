import torch

print("running on", torch.cuda.get_device_name(0))
print(torch.cuda.get_device_name())
used = torch.cuda.memory_allocated() + torch.cuda.max_memory_allocated(0)
print(f"{torch.cuda.max_memory_allocated() / 1024**2:.1f} MB")
