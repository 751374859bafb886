"""What an agent waits for: warm per-tool latency of `kernelmap mcp` through
the official SDK's client over stdio (p50, p95), against the client's own
round trip (a tool listing) measured in the same session; and the cold CLI's CPU time
for `where --static`, `stack`, `path` and `callers` against `python -c
"import torch"`, measured in the same run, as a user has it (bytecode
compiled, caches warm).

Warm questions are asked twice: each first ask is a question the server has
not answered yet (its producers are open, the answer is not: varied
operators, so that what a warm process keeps of the code, not of the
question, is what is measured), each second ask one it has (answered from
what it kept). Goals, on the first asks: p50 of warm `where` at most 10 ms,
`stack`/`path`/`callers` at most 50 ms; cold `where --static` at most 0.08x
`import torch`, `stack`/`path`/`callers` at most 0.3x.

    python benches/bench_mcp.py [--runs N] [--cache DIR] [--skip-cold] [--against SRC]

With `--against SRC` (another checkout's `src`), a second server runs that
code, asked each warm question right after this one: before and after a
change, measured together.

Needs the 2.6.0 test tree registered and indexed and the generated files
in the cache (`--cache`, else $KERNELMAP_CACHE_DIR, else the user cache).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from timing import wall

ROOT = Path(__file__).resolve().parents[1]

WHERE_NAMES = ["torch.add", "torch.nn.functional.conv2d", "aten::mul.Tensor", "torch.relu", "F.gelu", "torch.matmul", "aten::sum.dim_IntList",
               "torch.nn.Linear", "aten::index_select", "torch.Tensor.add_", "aten::softmax.int", "torch.cat", "aten::mean.dim",
               "torch.nn.functional.layer_norm", "aten::bmm", "torch.sigmoid", "aten::addmm", "torch.where", "aten::sort", "torch.exp"]
STACKS = ["torch.nn.Conv2d", "torch.add", "torch.nn.Linear", "aten::mul.Tensor", "torch.relu", "torch.sigmoid", "aten::sum.dim_IntList",
          "torch.matmul", "aten::sort", "torch.cat", "torch.nn.functional.softmax", "aten::index_select"]
PATHS = [("torch.nn.Conv2d", "cudnnConvolutionForward", "cuda"), ("torch.mm", "sgemm_", "cpu"), ("torch.add", "ufunc::add", "cpu"),
         ("torch.nn.Linear", "cublasSgemm", "cuda"), ("aten::mul.Tensor", "at::native::mul_kernel", "cpu"), ("torch.bmm", "at::native::cpublas::gemm", "cpu")]
CALLERS = ["cudnnConvolutionForward", "at::native::mul_kernel", "cpublas_gemm_impl", "sgemm_", "raw_cudnn_convolution_forward_out", "cublasSgemm"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def warm(envs: dict[str, dict[str, str]], repeats: int) -> None:
    """Each server of `envs` (a name -> its environment) asked the same
    questions, one after the other per question, so that a busy machine
    slows them alike."""
    from contextlib import AsyncExitStack

    import anyio
    from mcp import Client, StdioServerParameters

    questions = {
        "where": [("where", {"name": n}) for n in WHERE_NAMES],
        "stack": [("stack", {"target": t, "device": "cuda"}) for t in STACKS],
        "path": [("path", {"start": a, "target": b, "device": d}) for a, b, d in PATHS],
        "callers": [("callers", {"symbol": s}) for s in CALLERS],
        "find": [("find", {"name": n}) for n in ("mul_stub", "at::native::_convolution", "add_stub", "cudnn_convolution")],
        "explain": [("explain", {"op": o}) for o in ("aten::add.Tensor", "aten::mul.Tensor")],
        "gen": [("gen", {"op": o}) for o in ("aten::conv2d", "add.out")],
    }

    async def main() -> None:
        async with AsyncExitStack() as stack:
            clients = {}
            for name, env in envs.items():
                params = StdioServerParameters(command=sys.executable, args=["-m", "kernelmap", "mcp"], env=env)
                client = clients[name] = await stack.enter_async_context(Client(params))
                await client.call_tool("where", {"name": "torch.mul"})  # open the catalogs
                await client.call_tool("stack", {"target": "aten::sub.Tensor", "device": "cuda"})  # open the graph's producers
                await client.call_tool("callers", {"symbol": "at::native::add_kernel"})
            for name, client in clients.items():
                trips = []
                for _ in range(50):  # the transport and the SDK alone: a tool listing, never from the client's cache
                    t = time.perf_counter()
                    await client.list_tools(cache_mode="refresh")
                    trips.append(time.perf_counter() - t)
                print(f"{name + ':':9}reference: the client's round trip (tools/list) p50 {statistics.median(trips) * 1000:7.2f} ms"
                      f"  p95 {percentile(trips, 0.95) * 1000:7.2f} ms")
            goals = {"where": 10, "stack": 50, "path": 50, "callers": 50}
            for tool, asks in questions.items():
                first: dict[str, list[float]] = {name: [] for name in clients}
                again: dict[str, list[float]] = {name: [] for name in clients}
                for q, args in asks:
                    for name, client in clients.items():
                        t = time.perf_counter()
                        result = await client.call_tool(q, args)
                        first[name].append(time.perf_counter() - t)
                        assert not result.is_error, (name, q, args, result.content[0].text)
                for _ in range(repeats):
                    for q, args in asks:
                        for name, client in clients.items():
                            t = time.perf_counter()
                            await client.call_tool(q, args)
                            again[name].append(time.perf_counter() - t)
                goal = goals.get(tool)
                for name in clients:
                    verdict = ""
                    if goal is not None:
                        p50 = statistics.median(first[name]) * 1000
                        verdict = f"  goal p50 <= {goal} ms on first asks: {'ok' if p50 <= goal else 'MISSED'}"
                    label = f"{tool} ({name})" if len(clients) > 1 else tool
                    print(f"{label:18} first ask  p50 {statistics.median(first[name]) * 1000:8.1f} ms  p95 {percentile(first[name], 0.95) * 1000:8.1f} ms"
                          f" (n={len(first[name])}) | asked again p50 {statistics.median(again[name]) * 1000:7.2f} ms"
                          f"  p95 {percentile(again[name], 0.95) * 1000:7.2f} ms (n={len(again[name])}){verdict}")

    anyio.run(main)


def with_source(env: dict[str, str], src: Path) -> dict[str, str]:
    return {**env, "PYTHONPATH": os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def cold(env: dict[str, str], runs: int) -> None:
    km = [sys.executable, "-m", "kernelmap"]
    commands = {
        "where aten::conv2d --static": (km + ["where", "aten::conv2d", "--static"], 0.08),
        "stack torch.nn.Conv2d --device cuda": (km + ["stack", "torch.nn.Conv2d", "--device", "cuda"], 0.3),
        "path torch.nn.Conv2d cudnnConvolutionForward": (km + ["path", "torch.nn.Conv2d", "cudnnConvolutionForward", "--device", "cuda"], 0.3),
        "callers cudnnConvolutionForward": (km + ["callers", "cudnnConvolutionForward"], 0.3),
    }
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], check=True, env=env, stdout=subprocess.DEVNULL)
    for cmd, _ in commands.values():  # warm: caches built, bytecode written
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    reference_wall, reference = wall([sys.executable, "-c", "import torch"], runs, env)
    print(f"import torch                                    CPU {reference * 1000:7.0f} ms  wall {reference_wall * 1000:7.0f} ms (median of {runs})")
    for label, (cmd, goal) in commands.items():
        ours_wall, ours = wall(cmd, runs, env)
        ratio = ours / reference
        print(f"kernelmap {label:38} CPU {ours * 1000:7.0f} ms  ratio {ratio:.2f}x (goal <= {goal:.2f}x): {'ok' if ratio <= goal else 'MISSED'}"
              f"  (wall {ours_wall / reference_wall:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="cold runs of each command")
    parser.add_argument("--repeats", type=int, default=5, help="how often each warm question is asked again")
    parser.add_argument("--cache", type=Path, help="the kernelmap cache to read (default: $KERNELMAP_CACHE_DIR or the user cache)")
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--against", type=Path, help="another checkout's src directory: its server asked the same questions in turn")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as a user has it: bytecode compiled
    if args.cache is not None:
        env["KERNELMAP_CACHE_DIR"] = str(args.cache)
    print("warm: kernelmap mcp over stdio, through the SDK's client")
    envs = {"this": with_source(env, ROOT / "src")}
    if args.against is not None:
        envs = {"against": with_source(env, args.against.resolve()), **envs}
    warm(envs if args.against is not None else {"this": env}, args.repeats)
    if not args.skip_cold:
        print("cold: one process per question")
        cold(env, args.runs)


if __name__ == "__main__":
    main()
