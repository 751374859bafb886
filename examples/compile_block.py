"""A conv + batch norm + relu block under torch.compile (CPU), with one graph
break: the example `kernelmap compile` maps.

    kernelmap compile examples/compile_block.py
"""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = self.bn(y)
        return torch.relu(y)


if __name__ == "__main__":
    block = torch.compile(Block().eval())
    with torch.no_grad():
        block(torch.randn(2, 3, 16, 16))
