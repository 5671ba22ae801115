import torch

print("running on", torch.cuda.get_device_name(0))
print(torch.cuda.get_device_name())
