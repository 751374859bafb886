"""The models the compile tests compile: a conv + batch norm + relu block, an
MLP with gelu, a small attention block, and a function with a graph break."""

import torch
from torch import nn


class ConvBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.conv(x)
        y = self.bn(y)
        return torch.relu(y)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        return self.fc2(h)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1)
        return scores @ v


def with_break(x):
    y = x.sin()
    print("graph break here")
    return y.cos()


def run() -> None:
    with torch.no_grad():
        torch.compile(ConvBlock().eval())(torch.randn(2, 3, 8, 8))
        torch.compile(MLP())(torch.randn(4, 16))
        torch.compile(Attention())(torch.randn(2, 5, 16))
    torch.compile(with_break)(torch.randn(8))
