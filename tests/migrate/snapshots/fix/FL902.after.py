"""FL902 (unsafe): comparisons with "cuda"."""
import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def check(x: torch.Tensor, device_type: str, device) -> bool:
    if x.device.type == torch.fl.device_type():
        return True
    if device_type != torch.fl.device_type():
        return False
    return torch.fl.device_type() in str(device)
