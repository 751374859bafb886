"""torchvision's ResNet-50 on the GPU, for `kernelmap verify --key CUDA`
(scripts/cuda/record): 53 convolutions, batch 8 at 224x224."""

import torch


def model():
    import torchvision

    return torchvision.models.resnet50().cuda()


def example_input():
    return torch.randn(8, 3, 224, 224).cuda()
