"""Benchmark the HTML report and the web app.

1. The ResNet-50 trace report (examples/resnet50.py, forward on the CPU,
   kernels linked to the selected source tree when there is one): its size,
   and its load time in headless Chromium (DOMContentLoaded, and first render:
   the viewer's `km-rendered` mark), against a plain page that embeds the same
   trace's Chrome JSON and parses it. Goals: under 3 MB, first render under 1 s.
2. The app (`kernelmap serve`, its own process on 127.0.0.1): median and 95th
   percentile latency of a warm stack page (`stack torch.nn.Conv2d --device
   cuda`) under 20 concurrent clients for 30 s, against a static asset of the
   same server under the same load. Goal: p50 under 300 ms, no errors.

    python benches/bench_html.py [--runs 5] [--seconds 30] [--clients 20] [--screenshots docs/]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
STACK = "/stack?target=torch.nn.Conv2d&device=cuda"

TIMING = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const mark = performance.getEntriesByName('km-rendered')[0] || performance.getEntriesByName('parsed')[0];
  return {dcl: nav.domContentLoadedEventEnd, render: mark ? mark.startTime : null};
}"""


def source_tree() -> str | None:
    from kernelmap.errors import KernelmapError
    from kernelmap.source.trees import select_tree

    try:
        return select_tree().name
    except KernelmapError:
        return None


def trace_report(out: Path) -> tuple[Path, Path, dict]:
    """The report of the ResNet-50 trace, and the Chrome trace it came from."""
    from kernelmap import trace
    from kernelmap.render import html
    from kernelmap.render.json import to_json
    from kernelmap.web.files import SourceFiles

    t = trace.run_script(str(ROOT / "examples/resnet50.py"), source_tree=source_tree())
    document = {"kernelmap": "trace/2", "tree": to_json(t.tree), "summary": t.summary().to_json()}
    start = time.perf_counter()
    page = html.render(document, excerpt=SourceFiles.discover().excerpt)
    render_s = time.perf_counter() - start
    report = out / "resnet50-trace.html"
    report.write_text(page)
    chrome = out / "resnet50-chrome.json"
    shutil.copyfile(t.file, chrome)
    # The reference: a plain page that embeds the same Chrome JSON and parses it.
    raw = chrome.read_text().replace("<", "\\u003c")
    plain = out / "plain.html"
    plain.write_text(
        "<!doctype html><meta charset=utf-8><title>trace</title>"
        f'<script type="application/json" id="d">{raw}</script>'
        "<script>const t = JSON.parse(document.getElementById('d').textContent);"
        "document.title = t.traceEvents.length + ' events'; performance.mark('parsed');</script>"
    )
    return report, plain, {"render_s": render_s, "document_bytes": len(json.dumps(document)), "chrome_bytes": chrome.stat().st_size}


def load_times(browser, path: Path, runs: int, shot: Path | None = None) -> dict:
    dcl, first = [], []
    for i in range(runs):
        page = browser.new_page()
        page.goto(path.as_uri())
        page.wait_for_function("() => performance.getEntriesByName('km-rendered').length || performance.getEntriesByName('parsed').length")
        t = page.evaluate(TIMING)
        dcl.append(t["dcl"])
        first.append(t["render"])
        if shot is not None and i == 0:
            page.screenshot(path=str(shot))
        page.close()
    return {"dcl_ms": statistics.median(dcl), "render_ms": statistics.median(first)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(url: str, seconds: float, clients: int, cookies: dict[str, str]) -> dict:
    """`clients` threads GET `url` in a loop for `seconds`: latencies and errors."""
    import httpx

    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client() -> None:
        with httpx.Client(timeout=30, cookies=cookies) as c:
            while time.monotonic() < stop:
                start = time.perf_counter()
                try:
                    r = c.get(url)
                    ok = r.status_code == 200
                except httpx.HTTPError as e:
                    ok, r = False, e
                took = time.perf_counter() - start
                with lock:
                    (latencies.append(took) if ok else errors.append(str(r)))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0]] * 99
    return {"requests": len(latencies), "errors": len(errors), "p50_ms": q[49] * 1000, "p95_ms": q[94] * 1000}


def bench_app(seconds: float, clients: int, shot: Path | None, browser) -> dict:
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "kernelmap", "serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        line = server.stderr.readline().decode()
        token = re.search(r"token=([\w-]+)", line)
        if token is None:
            raise RuntimeError("kernelmap serve did not start: " + line + server.stderr.read().decode()[-500:])
        cookies = {f"kernelmap-token-{port}": token.group(1)}  # what its link sets in a browser
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/static/app.js", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("kernelmap serve did not start: " + server.stderr.read().decode()[-500:])
                time.sleep(0.2)
        start = time.perf_counter()
        r = httpx.get(base + STACK, timeout=300, cookies=cookies)
        cold_ms = (time.perf_counter() - start) * 1000
        r.raise_for_status()
        if shot is not None:
            page = browser.new_page()
            page.goto(base + "/search?q=conv2d&token=" + token.group(1))
            page.goto(base + STACK)
            page.wait_for_selector("[data-km-ready]")
            page.fill("[data-testid=tree-search]", "cudnn_convolution")
            page.wait_for_selector(".row.hit")
            page.locator(".row.hit").first.click()
            page.screenshot(path=str(shot))
            page.close()
        reference = load(base + "/static/app.js", seconds, clients, cookies)
        stack = load(base + STACK, seconds, clients, cookies)
    finally:
        server.terminate()
        server.wait(10)
    return {"cold_ms": cold_ms, "reference": reference, "stack": stack}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--screenshots", type=Path, help="write report.png and app.png into this folder")
    args = parser.parse_args()
    if not os.path.exists(CHROMIUM):
        sys.exit("bench_html: Chromium is missing; run scripts/install-browser")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="kernelmap-bench-html-") as tmp, sync_playwright() as p:
        out = Path(tmp)
        browser = p.chromium.launch_persistent_context(str(out / "profile"), executable_path=CHROMIUM, args=FLAGS, headless=True,
                                                       viewport={"width": 1280, "height": 760})
        report, plain, facts = trace_report(out)
        size = report.stat().st_size
        shots = args.screenshots
        if shots:
            shots.mkdir(parents=True, exist_ok=True)
        ours = load_times(browser, report, args.runs, shots / "report.png" if shots else None)
        ref = load_times(browser, plain, args.runs)
        print(f"ResNet-50 trace report   {size / 1e6:6.2f} MB (goal < 3 MB: {'ok' if size < 3e6 else 'MISSED'}); "
              f"document {facts['document_bytes'] / 1e6:.2f} MB, Chrome trace {facts['chrome_bytes'] / 1e6:.2f} MB, rendered in {facts['render_s']:.2f} s")
        print(f"  report       DOMContentLoaded {ours['dcl_ms']:7.1f} ms  first render {ours['render_ms']:7.1f} ms (median of {args.runs}; "
              f"goal < 1000 ms: {'ok' if ours['render_ms'] < 1000 else 'MISSED'})")
        print(f"  Chrome JSON  DOMContentLoaded {ref['dcl_ms']:7.1f} ms  parsed       {ref['render_ms']:7.1f} ms (plain page, same trace)")
        print(f"  ratio        DOMContentLoaded {ours['dcl_ms'] / ref['dcl_ms']:.2f}x  first render / parse {ours['render_ms'] / ref['render_ms']:.2f}x")
        app = bench_app(args.seconds, args.clients, shots / "app.png" if shots else None, browser)
        s, r = app["stack"], app["reference"]
        print(f"app, {args.clients} clients for {args.seconds:.0f} s; cold stack page {app['cold_ms']:.0f} ms")
        print(f"  static asset  p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms  {r['requests']} requests, {r['errors']} errors")
        print(f"  stack page    p50 {s['p50_ms']:7.1f} ms  p95 {s['p95_ms']:7.1f} ms  {s['requests']} requests, {s['errors']} errors "
              f"(goal p50 < 300 ms, no errors: {'ok' if s['p50_ms'] < 300 and not s['errors'] else 'MISSED'})")
        print(f"  ratio         p50 {s['p50_ms'] / r['p50_ms']:.2f}x  p95 {s['p95_ms'] / r['p95_ms']:.2f}x")
        browser.close()


if __name__ == "__main__":
    main()
