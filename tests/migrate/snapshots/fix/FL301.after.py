import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def step(model, x):
    with torch.autocast(torch.fl.device_type(), enabled=torch.fl.is_accelerator()):
        y = model(x)
    with torch.autocast(torch.fl.device_type(), dtype=torch.bfloat16, enabled=torch.fl.is_accelerator()):
        z = model(y)
    with torch.autocast(torch.fl.device_type(), enabled=False):  # fp32 region
        return model(z)
