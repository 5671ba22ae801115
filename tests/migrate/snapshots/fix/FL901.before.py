import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(4, 4).to(device)
x = torch.zeros(2, 4, device="cuda:1" if torch.cuda.is_available() else "cpu")
dist_backend = "nccl" if torch.cuda.is_available() else "gloo"

# Compared with strings below: the choice must stay the string "cuda" / "cpu".
device_name = 'cuda' if torch.cuda.is_available() else 'cpu'
if 'cuda' in device_name:
    print("accelerated")
