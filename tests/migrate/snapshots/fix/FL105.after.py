"""FL105 (unsafe): a "cuda" string in a variable that reaches a device argument."""
import torch
import torch_fl  # noqa: F401  (installs torch.fl)

device = torch.fl.device_type()
device_type = torch.fl.device_type()
CONFIG = {"device": str(torch.fl.device("acc1"))}


def main():
    x = torch.zeros(2).to(device)
    with torch.autocast(device_type=device_type):
        y = x * 2
    return y.to(CONFIG["device"])
