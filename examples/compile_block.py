"""A conv + batch norm + relu block under torch.compile (CPU), with one graph
break: the block records the mean of its activations as a Python float, which
Dynamo cannot keep in a graph (`Tensor.item()`), so it compiles the code
before that line and the code after it as two graphs. The example `kernelmap
compile` maps.

    kernelmap compile examples/compile_block.py
"""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.mean_activation = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        self.mean_activation = y.mean().item()  # a Python float: the graph breaks here
        y = self.bn(y)
        return torch.relu(y)


if __name__ == "__main__":
    block = torch.compile(Block().eval())
    with torch.no_grad():
        out = block(torch.randn(2, 3, 16, 16))
    print(tuple(out.shape), f"mean activation {block.mean_activation:.3f}")
