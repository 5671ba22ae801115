import torch
import torch_fl  # noqa: F401  (installs torch.fl)

print("running on", torch.fl.get_device_properties(0).name)
print(torch.fl.get_device_properties().name)
used = torch.fl.memory_allocated() + torch.fl.max_memory_allocated(0)
print(f"{torch.fl.max_memory_allocated() / 1024**2:.1f} MB")
