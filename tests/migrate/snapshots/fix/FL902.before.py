"""FL902 (unsafe): comparisons with "cuda"."""
import torch


def check(x: torch.Tensor, device_type: str, device) -> bool:
    if x.device.type == "cuda":
        return True
    if device_type != "cuda":
        return False
    return "cuda" in str(device)
