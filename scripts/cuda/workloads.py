"""The CUDA workloads whose traces are kept as test fixtures (tests/trace/cuda).

Each public function runs one step of one workload and is traced as
`kernelmap trace workloads:NAME --warmup 3 --steps 1`: the warm-up calls build
the model, pick cuDNN's algorithms (with `cudnn.benchmark` on) and grow the
allocator, so the profiled step holds one whole iteration and nothing else.

- `resnet50_{fwd,train}_{fp32,bf16}_{bench,nobench}`: torchvision's ResNet-50,
  batch 32 at 224x224; `fwd` is inference (eval mode, no grad), `train` a
  forward and backward in train mode; `bf16` runs the forward under CUDA
  autocast to bfloat16; `bench` turns `torch.backends.cudnn.benchmark` on.
- `block_{bf16,fp32}` and `block_bf16_flash`, `block_bf16_efficient`: one
  transformer block (LayerNorm, fused QKV projection, causal
  `scaled_dot_product_attention`, output projection, GELU MLP), batch 8,
  1,024 tokens of width 1,024, forward and backward; the last two force one
  attention backend with `torch.nn.attention.sdpa_kernel`.
- `resnet50_fwd_fp32_mydconv`: the ResNet-50 inference of float32, every
  convolution routed to a scaffolded direct CUDA kernel (record's `custom` part).

Needs a GPU and torchvision; run by scripts/cuda/record.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

BATCH = 32


@functools.cache
def _resnet50():
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet50().cuda(), torch.randn(BATCH, 3, 224, 224, device="cuda")


def _resnet50_step(train: bool, bf16: bool, benchmark: bool) -> None:
    torch.backends.cudnn.benchmark = benchmark
    model, x = _resnet50()
    model.train(train)
    if not train:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            model(x)
        return
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        loss = model(x).float().square().mean()
    loss.backward()


class Block(nn.Module):
    """A pre-norm transformer block."""

    def __init__(self, width: int = 1024, heads: int = 16):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


@functools.cache
def _block():
    torch.manual_seed(0)
    return Block().cuda(), torch.randn(8, 1024, 1024, device="cuda")


def _block_step(bf16: bool, backend: str | None = None) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model, x = _block()
    model.zero_grad(set_to_none=True)
    backends = [getattr(SDPBackend, backend)] if backend else list(SDPBackend.__members__.values())
    backends = [b for b in backends if b != SDPBackend.ERROR]
    with sdpa_kernel(backends), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        loss = model(x).float().square().mean()
    loss.backward()


def resnet50_fwd_fp32_mydconv() -> None:
    """ResNet-50 inference in float32 with every convolution routed to a
    scaffolded direct CUDA kernel (`kernelmap_ext::mydconv`, built in the
    folder KERNELMAP_CUDA_PROJECT names), as `verify --key CUDA` routes them."""
    import os
    import sys

    from kernelmap.extend import override

    project = os.environ["KERNELMAP_CUDA_PROJECT"]
    if project not in sys.path:
        sys.path.insert(0, project)
    import mydconv  # noqa: F401 - loads the library: kernelmap_ext::mydconv

    torch.backends.cudnn.benchmark = False
    model, x = _resnet50()
    model.eval()
    with torch.no_grad(), override("aten::convolution", "kernelmap_ext::mydconv", key="CUDA", warn_unused=False):
        model(x)


def _define() -> None:
    for train in (False, True):
        for bf16 in (False, True):
            for bench in (False, True):
                name = f"resnet50_{'train' if train else 'fwd'}_{'bf16' if bf16 else 'fp32'}_{'bench' if bench else 'nobench'}"
                globals()[name] = functools.partial(_resnet50_step, train, bf16, bench)
    globals()["block_bf16"] = functools.partial(_block_step, True)
    globals()["block_fp32"] = functools.partial(_block_step, False)
    globals()["block_bf16_flash"] = functools.partial(_block_step, True, "FLASH_ATTENTION")
    globals()["block_bf16_efficient"] = functools.partial(_block_step, True, "EFFICIENT_ATTENTION")


_define()
NAMES = sorted(n for n, v in globals().items() if isinstance(v, functools.partial))  # resnet50_fwd_fp32_mydconv: its own part
