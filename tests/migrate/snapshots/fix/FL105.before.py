"""FL105 (unsafe): a "cuda" string in a variable that reaches a device argument."""
import torch

device = "cuda"
device_type = "cuda"
CONFIG = {"device": "cuda:1"}


def main():
    x = torch.zeros(2).to(device)
    with torch.autocast(device_type=device_type):
        y = x * 2
    return y.to(CONFIG["device"])
