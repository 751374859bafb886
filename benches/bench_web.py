"""Benchmark what clients can cost the web app (`kernelmap serve`, its own
process on 127.0.0.1, entered with the token its printed link holds).

1. Load: `--clients` clients (default 50) ask for five stack pages for
   `--seconds` (default 30), starting cold (the first answers are computed
   while the others wait), against a static asset of the same server under
   the same load. Goal: no errors.
2. A static asset while a long page computes (`callers` of a common kernel,
   depth 3, tens of seconds), against the same asset on the idle server.
   Goal: under 100 ms.
3. Memory: the server's RSS after 20 trace imports and after 200 (a
   100-module CPU trace, uploaded), and their ratio. Goal: flat (the app
   keeps the last 16 traces).

    python benches/bench_web.py [--seconds 30] [--clients 50] [--imports 200]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

STACKS = ("torch.add", "torch.mul", "torch.relu", "torch.nn.Conv2d", "torch.matmul")
LONG = "/callers?symbol=at::native::empty_cpu&depth=3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`kernelmap serve` on a free port; `cookies` are what its link sets."""

    def __init__(self) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "kernelmap", "serve", "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"token=([\w-]+)", line)
        if not m:
            raise RuntimeError(f"kernelmap serve did not start: {line}{self.proc.stderr.read()[-500:]}")
        self.cookies = {f"kernelmap-token-{self.port}": m.group(1)}
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.base + "/static/app.js", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("kernelmap serve did not answer") from None
                time.sleep(0.2)

    def client(self, timeout: float = 300) -> httpx.Client:
        return httpx.Client(base_url=self.base, cookies=self.cookies, timeout=timeout)

    def rss(self) -> int:
        return int(Path(f"/proc/{self.proc.pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")  # resident bytes (Linux)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def load(server: Server, urls: list[str], seconds: float, clients: int) -> dict:
    """`clients` threads GET `urls` in turn for `seconds`: latencies and errors."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(n: int) -> None:
        with server.client(timeout=120) as c:
            i = n
            while time.monotonic() < stop:
                start = time.perf_counter()
                try:
                    r = c.get(urls[i % len(urls)])
                    ok, what = r.status_code == 200, f"HTTP {r.status_code}"
                except httpx.HTTPError as e:
                    ok, what = False, repr(e)
                took = time.perf_counter() - start
                with lock:
                    (latencies.append(took) if ok else errors.append(what))
                i += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 300)
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0] if latencies else float("nan")] * 99
    return {"requests": len(latencies), "errors": len(errors), "first_errors": errors[:3], "p50_ms": q[49] * 1000, "p95_ms": q[94] * 1000}


def static_times(server: Server, n: int = 20) -> list[float]:
    took = []
    with httpx.Client(base_url=server.base, timeout=30) as c:
        for _ in range(n):
            start = time.perf_counter()
            c.get("/static/report.css").raise_for_status()
            took.append(time.perf_counter() - start)
            time.sleep(0.05)
    return took


def cpu_trace(path: Path, ops: int = 100) -> bytes:
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "thread 1 (python)"}}]
    for i in range(ops):
        t = i * 300
        events.append({"ph": "X", "cat": "python_function", "name": f"nn.Module: Layer_{i}", "pid": 1, "tid": 1, "ts": t, "dur": 100, "args": {}})
        for name, ts, dur in (("aten::add", t + 1, 80), ("aten::mul", t + 82, 10)):
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                           "args": {"Input Dims": [[2, 2], [2, 2]], "Input type": ["float", "float"]}})
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path.read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--imports", type=int, default=200)
    parser.add_argument("--parts", default="load,static,memory", help="which parts to run (comma-separated)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))

    server = Server()
    try:
        if "load" in parts:
            bench_load(server, args.seconds, args.clients)
        if "static" in parts:
            bench_static(server)
        if "memory" in parts:
            bench_memory(server, args.imports)
    finally:
        server.stop()


def bench_load(server: Server, seconds: float, clients: int) -> None:
    s = load(server, [f"/stack?target={t}" for t in STACKS], seconds, clients)
    r = load(server, ["/static/app.js"], seconds, clients)
    print(f"load, {clients} clients for {seconds:.0f} s (stack pages cold at the start)")
    print(f"  static asset  p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms  {r['requests']} requests, {r['errors']} errors")
    print(f"  stack pages   p50 {s['p50_ms']:7.1f} ms  p95 {s['p95_ms']:7.1f} ms  {s['requests']} requests, {s['errors']} errors "
          f"(goal: no errors: {'ok' if not s['errors'] else 'MISSED ' + str(s['first_errors'])})")
    print(f"  ratio         p50 {s['p50_ms'] / r['p50_ms']:.2f}x  p95 {s['p95_ms'] / r['p95_ms']:.2f}x")


def bench_static(server: Server) -> None:
    idle = static_times(server)
    done: dict = {}

    def long_page() -> None:
        start = time.perf_counter()
        with server.client() as c:
            done["status"] = c.get(LONG).status_code
        done["s"] = time.perf_counter() - start

    worker = threading.Thread(target=long_page)
    worker.start()
    time.sleep(0.5)
    busy = static_times(server)
    overlapped = worker.is_alive()
    worker.join(600)
    print(f"static asset while `{LONG}` computes ({done.get('s', float('nan')):.1f} s, HTTP {done.get('status')}"
          f"{'' if overlapped else ', finished before the measurements ended'})")
    print(f"  idle          median {statistics.median(idle) * 1000:6.1f} ms  max {max(idle) * 1000:6.1f} ms")
    print(f"  busy          median {statistics.median(busy) * 1000:6.1f} ms  max {max(busy) * 1000:6.1f} ms "
          f"(goal < 100 ms: {'ok' if max(busy) < 0.1 else 'MISSED'})")
    print(f"  ratio         median {statistics.median(busy) / statistics.median(idle):.2f}x")


def bench_memory(server: Server, imports: int) -> None:
    with tempfile.TemporaryDirectory(prefix="kernelmap-bench-web-") as tmp:
        data = cpu_trace(Path(tmp) / "t.json")
    first = 0
    with server.client() as c:
        start = time.perf_counter()
        for i in range(imports):
            r = c.post("/trace", files={"file": (f"t{i}.json", data, "application/json")})
            if r.status_code != 303:
                raise RuntimeError(f"import {i}: HTTP {r.status_code}")
            if i == 19:
                first = server.rss()
        took = time.perf_counter() - start
    last = server.rss()
    print(f"memory over {imports} imports of a {len(data) / 1e3:.0f} kB trace ({took / imports * 1000:.0f} ms each)")
    print(f"  RSS after 20 {first / 1e6:7.1f} MB, after {imports} {last / 1e6:7.1f} MB: ratio {last / first:.2f}x "
          f"(goal flat: {'ok' if last / first < 1.1 else 'MISSED'})")


if __name__ == "__main__":
    main()
