"""What scripts/cuda/record wrote on a GPU machine -> the fixtures of
tests/trace/cuda, which the CPU-only tests replay.

    python scripts/cuda/fixtures.py OUT [OUT...] [--into tests/trace/cuda]

Several record folders may be given (parts recorded in separate runs); a later
folder's file replaces an earlier one's. Traces keep every event of their one
profiled step: only kernelmap's own annotations (`args["kernelmap"]`, added by
--export-chrome) are taken out, and `traceName` (a temporary file's name on
that machine) becomes the workload's name. In the JSON documents, paths inside
the checkout the record ran from are made relative to it.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _trace(src: Path, dst: Path) -> None:
    with gzip.open(src, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    doc.pop("kernelmap", None)
    doc["traceName"] = dst.name.removesuffix(".json.gz")
    for event in doc["traceEvents"]:
        args = event.get("args")
        if isinstance(args, dict):
            args.pop("kernelmap", None)
    with gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as f:
        f.write(json.dumps(doc, separators=(",", ":")).encode())


def _document(src: Path, dst: Path, checkout: str) -> None:
    text = src.read_text(encoding="utf-8")
    json.loads(text)  # a document, whole
    dst.write_text(text.replace(checkout.rstrip("/") + "/", ""), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outs", nargs="+", type=Path)
    parser.add_argument("--into", type=Path, default=ROOT / "tests/trace/cuda")
    parser.add_argument("--checkout", default=None, help="the checkout's path on the GPU machine (default: OUT/checkout.txt)")
    a = parser.parse_args()
    a.into.mkdir(parents=True, exist_ok=True)
    for out in a.outs:
        checkout = a.checkout or (out / "checkout.txt").read_text().strip()
        for src in sorted((out / "traces").glob("*.json.gz")):
            _trace(src, a.into / src.name)
        for src in sorted((out / "custom").glob("*.json.gz")):  # traces that run a scaffolded kernel
            (a.into / "extension").mkdir(exist_ok=True)
            _trace(src, a.into / "extension" / src.name)
        for src in [*sorted((out / "live").glob("*.json")), *sorted((out / "builds").glob("verify-*.json"))]:
            if src.stat().st_size:
                _document(src, a.into / src.name, checkout)
        results = a.into / "scaffold-tests.txt"  # the last line pytest printed for each scaffolded project
        lines = dict(line.split(": ", 1) for line in results.read_text().splitlines()) if results.exists() else {}
        for src in sorted((out / "logs").glob("test-*.log")):
            text = src.read_text(errors="replace")
            fatal = text.find("Fatal Python error")
            if fatal >= 0:  # pytest printed a dot per test passed before the crash
                line = f"{text[fatal:].splitlines()[0]} after {text[:fatal].count('.')} tests passed"
            else:
                line = (text.strip().splitlines() or ["(empty log)"])[-1]
            lines[src.stem.removeprefix("test-")] = line
        results.write_text("".join(f"{k}: {v}\n" for k, v in sorted(lines.items())))


if __name__ == "__main__":
    main()
