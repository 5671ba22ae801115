import torch
import torch_fl  # noqa: F401  (installs torch.fl)

scaler = torch.amp.GradScaler(torch.fl.device_type())
tuned = torch.amp.GradScaler(torch.fl.device_type(), init_scale=2.0**10, enabled=True)
positional = torch.amp.GradScaler(torch.fl.device_type(), 1024.0)
