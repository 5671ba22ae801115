import torch
import torch_fl  # noqa: F401  (installs torch.fl)

print("running on", torch.fl.get_device_properties(0).name)
print(torch.fl.get_device_properties().name)
