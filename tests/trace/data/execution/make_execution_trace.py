"""Regenerate et-mlp.json.gz and et-mlp-kineto.json.gz: a small MLP's forward
and backward on the CPU, recorded by torch's own ExecutionTraceObserver and
by the Kineto profiler in the same run (what Chakra's linker joins).

    python tests/trace/data/execution/make_execution_trace.py
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path

import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

HERE = Path(__file__).resolve().parent


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with tempfile.TemporaryDirectory() as d:
        et_path, kineto_path = Path(d) / "et.json", Path(d) / "kineto.json"
        observer = ExecutionTraceObserver().register_callback(str(et_path))
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=observer) as prof:
            model(x).sum().backward()
        prof.export_chrome_trace(str(kineto_path))
        observer.unregister_callback()
        kineto = json.loads(kineto_path.read_text())
        kineto["traceName"] = "et-mlp-kineto.json"  # the temporary path it was written to names nothing
        for name, doc in (("et-mlp.json.gz", json.loads(et_path.read_text())), ("et-mlp-kineto.json.gz", kineto)):
            with gzip.GzipFile(HERE / name, "wb", mtime=0) as f:
                f.write(json.dumps(doc).encode())
            os.chmod(HERE / name, 0o644)


if __name__ == "__main__":
    main()
