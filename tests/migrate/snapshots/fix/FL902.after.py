"""FL902 (unsafe): comparisons with "cuda"."""
import torch
import torch_fl  # noqa: F401  (installs torch.fl)


def check(x: torch.Tensor, device_type: str, device) -> bool:
    if torch.fl.is_accelerator(x.device.type):
        return True
    if not torch.fl.is_accelerator(device_type):
        return False
    return torch.fl.is_accelerator(str(device))
