import torch
import torch_fl  # noqa: F401  (installs torch.fl)

device = torch.fl.device()
model = torch.nn.Linear(4, 4).to(device)
x = torch.zeros(2, 4, device=torch.fl.device("acc1"))
dist_backend = torch.fl.dist_backend()

# Compared with strings below: the choice must stay the string "cuda" / "cpu".
device_name = torch.fl.device_type()
if 'cuda' in device_name:
    print("accelerated")
