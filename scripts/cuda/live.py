"""Live facts of a CUDA build of torch, written as one JSON document for the
CPU-only tests (tests/trace/cuda/live.json):

- `run`: the versions of torch, CUDA, cuDNN and cuBLAS and the GPU;
- `conv` and `batch_norm`: what `torch._C._select_conv_backend` and
  `torch._C._select_batch_norm_backend` choose for every convolution and batch
  norm of torchvision's ResNet-50 (batch 32, 224x224), in float32 and bfloat16,
  with the arguments each layer is called with (read by forward hooks);
- `registrations`: every kernel the live dispatcher says was registered from
  a generated file, checked against the files kernelmap regenerates with this
  torch's own torchgen: the TORCH_LIBRARY_IMPL block at that file and line must
  register the operator under that key; counted per dispatch key, CUDA ones
  listed.

Needs a GPU and torchvision; run by scripts/cuda/record.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from collections import Counter, defaultdict

import torch


def run_facts() -> dict:
    props = torch.cuda.get_device_properties(0)

    def dist(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return {
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "cublas_wheel": dist("nvidia-cublas") or dist("nvidia-cublas-cu13"),
        "cudnn_wheel": dist("nvidia-cudnn-cu13"),
        "gpu": props.name,
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "driver": smi.stdout.strip().split(", ")[-1] if smi.returncode == 0 else None,
        "torchvision": dist("torchvision"),
        "python": sys.version.split()[0],
    }


def backends() -> tuple[list[dict], list[dict]]:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda()
    seen: list[tuple[str, torch.nn.Module, torch.Size]] = []
    hooks = [m.register_forward_pre_hook(lambda mod, args, name=name: seen.append((name, mod, args[0].shape)))
             for name, m in model.named_modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d))]
    with torch.no_grad():
        model(torch.randn(32, 3, 224, 224, device="cuda"))
    for h in hooks:
        h.remove()
    conv, bn = [], []
    for dtype in (torch.float32, torch.bfloat16):
        for name, mod, shape in seen:
            x = torch.empty(shape, device="cuda", dtype=dtype)
            if isinstance(mod, torch.nn.Conv2d):
                w = mod.weight.to(dtype)
                b = mod.bias.to(dtype) if mod.bias is not None else None
                chosen = torch._C._select_conv_backend(x, w, b, list(mod.stride), list(mod.padding), list(mod.dilation),
                                                       False, [0, 0], mod.groups)
                conv.append({"module": name, "dtype": str(dtype).removeprefix("torch."), "input": list(shape),
                             "weight": list(mod.weight.shape), "stride": list(mod.stride), "padding": list(mod.padding),
                             "dilation": list(mod.dilation), "groups": mod.groups, "backend": chosen.name})
                continue
            for training in (False, True):
                # autocast leaves batch norm's parameters in float32 beside a bfloat16 input
                chosen = torch._C._select_batch_norm_backend(x, mod.weight, mod.bias, mod.running_mean, mod.running_var,
                                                             training, mod.eps)
                bn.append({"module": name, "dtype": str(dtype).removeprefix("torch."), "input": list(shape),
                           "training": training, "backend": chosen.name})
    return conv, bn


def registrations() -> dict:
    from kernelmap import dispatch
    from kernelmap.codegen import generated_files
    from kernelmap.model import is_generated_path

    generated = generated_files()
    checked: Counter = Counter()
    matched: Counter = Counter()
    misses: dict[str, list[str]] = defaultdict(list)
    cuda: list[list] = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, op = name.partition("::")
        for reg in dispatch.registrations(name):
            loc = reg.kernel.location
            if loc is None or reg.kernel.kind != "cpp" or not is_generated_path(loc.path):
                continue
            key = reg.kernel.key
            checked[key] += 1
            ok = (namespace, key, op) in generated.registrations_at(loc.path, loc.line)
            matched[key] += ok
            if not ok:
                misses[key].append(f"{name}: {loc.path}:{loc.line}")
            if "CUDA" in key:
                cuda.append([name, key, loc.path, loc.line, ok, generated.lines(loc.path)[loc.line - 1]])
    return {
        "generated": generated.origin.label,
        "checked": dict(checked),
        "matched": dict(matched),
        "misses": dict(misses),
        "cuda": cuda,
    }


def main() -> None:
    out = {"run": run_facts()}
    out["conv"], out["batch_norm"] = backends()
    out["registrations"] = registrations()
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
