import torch
import torch_fl  # noqa: F401  (installs torch.fl)

scaler = torch.amp.GradScaler(torch.fl.device_type(), enabled=torch.fl.is_accelerator())
tuned = torch.amp.GradScaler(torch.fl.device_type(), init_scale=2.0**10, enabled=torch.fl.is_accelerator())
positional = torch.amp.GradScaler(torch.fl.device_type(), init_scale=1024.0, enabled=torch.fl.is_accelerator())
