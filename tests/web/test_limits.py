"""What a client can cost the app, against the real app on a real server:
memory stays flat over 200 trace imports and a gzip bomb is cut off at the
limit; a static file is served at once while a long page computes; 50
clients on stack pages get no error; a half-sent request is dropped; a
number is parsed strictly; and a rebuilt index is read, not the old one.
(`benches/bench_web.py` runs the load for 30 s.)"""

from __future__ import annotations

import asyncio
import gc
import io
import os
import socket
import tempfile
import threading
import time
import tracemalloc
import warnings
import zlib
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from tests.trace.conftest import KinetoWriter
from tests.web.conftest import TREE_NAME, Served

pytestmark = pytest.mark.slow
ORIGIN = "http://127.0.0.1:8765"
STACKS = ("torch.add", "torch.mul", "torch.relu", "torch.nn.Conv2d", "torch.matmul")


def client_of(app, **options) -> TestClient:
    """A client holding the app's token, as a browser that opened the link."""
    from kernelmap.web.guard import cookie_name

    warnings.simplefilter("ignore", DeprecationWarning)
    c = TestClient(app, base_url=ORIGIN, follow_redirects=False, **options)
    c.cookies.set(cookie_name(8765), app.state.token)
    return c


def rss() -> int:
    """This process's resident memory in bytes (Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_trace(path: Path, ops: int = 100) -> bytes:
    """A CPU trace of `ops` modules, each an add and a mul."""
    k = KinetoWriter()
    for i in range(ops):
        t = i * 300
        k.host("python_function", f"nn.Module: Layer_{i}", t, 100)
        k.op("aten::add", t + 1, 80, [(2, 2), (2, 2)], ["float", "float"])
        k.op("aten::mul", t + 82, 10, [(2, 2), (2, 2)], ["float", "float"])
    return k.write(path).read_bytes()


# -- parameters ----------------------------------------------------------------


@pytest.mark.parametrize("depth", ["²", "٣", "3²", "1e3", "-1", "+3", "0x10", "65", "99999999999999999999", "3.0"])
def test_numbers_are_parsed_strictly(files, depth):
    """The defect: `depth=²` passed str.isdigit() and was a 500."""
    from kernelmap.web.app import create_app

    with client_of(create_app(files, source=TREE_NAME)) as c:
        for page, key in (("stack", "target"), ("callers", "symbol")):
            r = c.get(f"/{page}", params={key: "torch.add", "depth": depth})
            assert r.status_code == 400 and "depth must be a whole number from 0 to 64" in r.text, (page, depth, r.status_code)


# -- memory ----------------------------------------------------------------------


def test_memory_stays_flat_over_200_imports(files, tmp_path, monkeypatch):
    """The defect: every import was kept for ever (93 MB for a 1.7 MB trace).
    Imports go to the trace store, bounded by bytes on disk; the app keeps
    the last 16 names and pages bounded by count and bytes; the process's
    memory after 200 imports of 200 different traces is what it was after 40."""
    from kernelmap.trace.store import stored
    from kernelmap.web.app import create_app

    cache = tmp_path / "cache"
    cache.mkdir()
    for kept in Path(os.environ["KERNELMAP_CACHE_DIR"]).iterdir():
        if kept.name != "trace":  # the catalog and the index are reused; the trace store starts empty
            (cache / kept.name).symlink_to(kept, target_is_directory=kept.is_dir())
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(cache))
    monkeypatch.setenv("KERNELMAP_TRACE_STORE_MB", "2")
    app = create_app(files)
    with client_of(app) as c:
        first = None
        for i in range(200):
            data = cpu_trace(tmp_path / "t.json", 100 + i)  # another trace each time: another store id
            r = c.post("/trace", files={"file": (f"t{i}.json", data, "application/json")})
            assert r.status_code == 303, r.text[-300:]
            assert c.get(r.headers["location"]).status_code == 200
            if i == 39:
                gc.collect()
                first = rss()
        gc.collect()
        last = rss()
        traces = app.state.traces
        assert len(traces) == 16 and traces.bytes < 16 * 1000
        assert sum(s["bytes"] for s in stored()) < 2 * 2**20 + 300_000  # the bound, and at most the trace just imported beyond it
        assert c.get(r.headers["location"]).status_code == 200  # the last is kept
    grown = (last - first) / 1e6
    assert grown < 25, f"RSS grew {grown:.1f} MB over 160 imports"


def test_a_gzip_bomb_is_cut_off_at_the_limit(files, tmp_path):
    """The defect: a 0.8 MB gzip upload was unpacked whole (670 MB). A 0.2 MB
    upload that unpacks to 200 MB is refused once 4 MB are out, in bounded
    memory."""
    from kernelmap.web.app import create_app

    pack = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = pack.compress(b'{"traceEvents": [') + b"".join(pack.compress(b" " * (1 << 20)) for _ in range(200)) + pack.flush()
    assert len(bomb) < 300_000
    app = create_app(files, max_upload=4 * 1024 * 1024)
    with client_of(app) as c:
        tracemalloc.start()
        try:
            r = c.post("/trace", files={"file": ("bomb.json.gz", bomb, "application/gzip")})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert r.status_code == 413 and "unpacks to more than the limit of 4 MB" in r.text
        assert peak < 24e6, f"peak {peak / 1e6:.1f} MB"
        # a gzip that ends early, and bytes that are no gzip after a member, are one clear line each
        good = zlib.compress(cpu_trace(tmp_path / "t.json", 2), wbits=31)
        r = c.post("/trace", files={"file": ("cut.json.gz", good[: len(good) // 2], "application/gzip")})
        assert r.status_code == 400 and "truncated gzip" in r.text
        r = c.post("/trace", files={"file": ("two.json.gz", good + b"\x1f\x8bjunk", "application/gzip")})
        assert r.status_code == 400 and "not a well-formed gzip" in r.text
        r = c.post("/trace", files={"file": ("ok.json.gz", good, "application/gzip")})
        assert r.status_code == 303


def test_stores_are_bounded_by_count_and_bytes():
    from kernelmap.web.store import Bounded

    store: Bounded[str] = Bounded(count=3, size=100)
    for i in range(5):
        store.put(str(i), "x", 10)
    assert [k for k, _ in store.items()] == ["2", "3", "4"] and store.bytes == 30
    store.get("2")  # used: the least recently used is 3 now
    dropped = store.put("big", "y", 85)  # one over the count, then 5 bytes over the size
    assert [k for k, _ in dropped] == ["3", "4"] and [k for k, _ in store.items()] == ["2", "big"] and store.bytes == 95
    assert store.put("huge", "z", 101) == [] and store.get("huge") is None


# -- time ------------------------------------------------------------------------


def test_a_static_file_is_served_at_once_while_a_long_page_computes(files):
    """The defects: a search suggestion and a trace import ran on the event
    loop, so a static file waited 6.4 s, and 36 s behind a long page."""
    from kernelmap.web.app import create_app

    served = Served(create_app(files, source=TREE_NAME))
    try:
        long_page: dict = {}

        def compute() -> None:
            start = time.perf_counter()
            with served.client() as c:
                long_page["status"] = c.get("/explain", params={"op": "aten::convolution_backward", "device": "cuda"}).status_code
            long_page["s"] = time.perf_counter() - start

        def suggest() -> None:
            with served.client() as c:
                c.get("/api/suggest", params={"q": "convolution"})

        worker = threading.Thread(target=compute)
        worker.start()
        deadline = time.monotonic() + 30
        while served.app.state.work.pending == 0:
            assert time.monotonic() < deadline, "the long page never started"
            time.sleep(0.01)
        threading.Thread(target=suggest).start()
        took = []
        with httpx.Client(base_url=served.url, timeout=30) as c:
            for _ in range(10):
                start = time.perf_counter()
                r = c.get("/static/report.css")
                took.append(time.perf_counter() - start)
                assert r.status_code == 200 and len(r.content) > 1000
                time.sleep(0.02)
        still_computing = worker.is_alive()
        worker.join(300)
        assert long_page.get("status") == 200
        assert still_computing, f"the long page took {long_page['s']:.2f} s: too short to show anything"
        assert max(took) < 0.1, [round(t * 1000) for t in took]
    finally:
        served.stop()


def test_50_clients_on_stack_pages_get_no_error(files):
    """The defect: four concurrent /stack requests gave three 500s
    (sqlite3.ProgrammingError: a connection used from another thread), and
    every stack page after them was a 500. Here 50 clients ask at once for
    five stack pages no one asked for before, then go on asking for 5 s;
    `benches/bench_web.py` does it for 30 s."""
    from kernelmap.web.app import create_app

    served = Served(create_app(files, source=TREE_NAME))
    errors: list[str] = []
    done = [0]
    lock = threading.Lock()
    start = threading.Barrier(51)
    warm = threading.Barrier(51)
    stop = [0.0]

    def ask(c: httpx.Client, target: str) -> None:
        try:
            r = c.get("/stack", params={"target": target})
            ok, what = r.status_code == 200 and "km-data" in r.text, f"{r.status_code} {r.text[-200:]}"
        except httpx.HTTPError as e:
            ok, what = False, repr(e)
        with lock:
            if ok:
                done[0] += 1
            else:
                errors.append(what)

    def client(n: int) -> None:
        with served.client(timeout=120) as c:
            start.wait()
            ask(c, STACKS[n % len(STACKS)])  # all at once, cold: computed in several threads
            warm.wait()
            i = n
            while time.monotonic() < stop[0]:
                i += 1
                ask(c, STACKS[i % len(STACKS)])

    try:
        threads = [threading.Thread(target=client, args=(n,)) for n in range(50)]
        for t in threads:
            t.start()
        start.wait()
        warm.wait(300)
        assert not errors, errors[:3]
        stop[0] = time.monotonic() + 5
        for t in threads:
            t.join(300)
        assert not errors, errors[:3]
        assert done[0] >= 150, done[0]
        with served.client() as c:  # and the server still answers every page
            assert all(c.get("/stack", params={"target": t}).status_code == 200 for t in STACKS)
    finally:
        served.stop()


def test_a_context_opened_in_one_thread_answers_in_another(context):
    """The mechanism: the catalogs', index's and generated files' databases
    are read through one connection per thread."""
    from kernelmap import graph

    ctx = context("cpu")
    out: dict = {}

    def other() -> None:
        try:
            out["tree"] = graph.stack("torch.add", ctx)
            out["ops"] = ctx.catalog.resolve("torch.add")
            out["files"] = ctx.generated.paths()[:3]
            out["defs"] = ctx.index.definitions("at::native::empty_cpu")
        except Exception as e:  # noqa: BLE001 - the test reports what failed
            out["error"] = e

    for _ in range(2):
        t = threading.Thread(target=other)
        t.start()
        t.join(300)
        assert "error" not in out, out.get("error")
        assert out["tree"].root.children and out["ops"] and out["files"] and out["defs"]


def test_each_thread_reads_through_its_own_connection(tmp_path):
    """kernelmap.connections.PerThread, on a file and in memory; a file
    replaced since it was opened is not mixed with the old one."""
    import sqlite3

    from kernelmap.connections import DatabaseReplaced, PerThread

    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (1)")
    memory = sqlite3.connect(":memory:")
    memory.execute("CREATE TABLE t (x)")
    memory.execute("INSERT INTO t VALUES (2)")
    memory.commit()
    shared = [PerThread(sqlite3.connect(f"file:{path}?mode=ro", uri=True)), PerThread(memory)]
    out: list = []

    def read() -> None:
        try:
            out.append(tuple(db.execute("SELECT x FROM t").fetchone()[0] for db in shared))
        except Exception as e:  # noqa: BLE001 - the test reports what failed
            out.append(e)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out == [(1, 2)] * 4, out
    replacement = tmp_path / "new.sqlite"
    with sqlite3.connect(replacement) as db:
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (3)")
    os.replace(replacement, path)  # as a rebuilt index is renamed into place
    out.clear()
    t = threading.Thread(target=read)
    t.start()
    t.join(30)
    assert len(out) == 1 and isinstance(out[0], DatabaseReplaced), out
    assert shared[0].execute("SELECT x FROM t").fetchone()[0] == 1  # the thread that opened it reads on what it opened
    for db in shared:
        db.close()


def test_the_pool_is_bounded_and_times_out():
    from kernelmap.web.work import Busy, TooSlow, Work

    async def scenario() -> None:
        work = Work(workers=1, waiting=1, timeout=5)
        gate = threading.Event()
        first = asyncio.ensure_future(work.run(lambda: gate.wait(5) and "first", key="a"))
        shared = asyncio.ensure_future(work.run(lambda: "never run: the job of key a is shared", key="a"))
        queued = asyncio.ensure_future(work.run(lambda: "queued"))
        await asyncio.sleep(0.05)
        assert work.pending == 2
        with pytest.raises(Busy):
            await work.run(lambda: "refused: one running, one waiting")
        gate.set()
        assert (await first, await shared, await queued) == ("first", "first", "queued")
        await asyncio.sleep(0.05)
        assert work.pending == 0
        work.close()
        slow = Work(workers=1, waiting=0, timeout=0.3)
        with pytest.raises(TooSlow):
            await slow.run(lambda: time.sleep(1))
        assert slow.pending == 1  # a running thread is not stopped: it finishes, and counts until it has
        await asyncio.sleep(1.2)
        assert slow.pending == 0
        slow.close()

    failed: list[BaseException] = []

    def run() -> None:  # a thread of its own: the browser tests' driver may hold this thread's event loop
        try:
            asyncio.run(scenario())
        except BaseException as e:  # noqa: BLE001 - reported below
            failed.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    if failed:
        raise failed[0]


def read_reply(s: socket.socket, limit: float) -> bytes:
    s.settimeout(limit)
    reply = b""
    try:
        while chunk := s.recv(65536):
            reply += chunk
    except socket.timeout:
        raise AssertionError(f"the server held the connection for more than {limit} s") from None
    return reply


def test_a_half_sent_request_is_dropped(files, monkeypatch):
    """The defect: an incomplete request never timed out. The head must be
    whole within the deadline (1 s here), however slowly it drips; a body
    within its own (an upload)."""
    from kernelmap.web import app as web_app
    from kernelmap.web.server import TimedH11Protocol

    monkeypatch.setattr(TimedH11Protocol, "head_timeout", 1.0)
    monkeypatch.setattr(web_app, "BODY_TIMEOUT", 1.0)
    served = Served(web_app.create_app(files))
    try:
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", served.port)) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: the head never ends
            assert read_reply(s, 10) == b""
        assert time.monotonic() - start < 5
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", served.port)) as s:
            s.settimeout(0.5)
            for byte in b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100:  # one byte at a time
                try:
                    s.sendall(bytes([byte]))
                except OSError:
                    break
                time.sleep(0.05)
            assert read_reply(s, 10) == b""
        assert time.monotonic() - start < 8
        # a body that stops halfway: 408, then the connection closes
        cookie = "; ".join(f"{k}={v}" for k, v in served.cookies.items())
        with socket.create_connection(("127.0.0.1", served.port)) as s:
            s.sendall(f"POST /trace HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nCookie: {cookie}\r\n"
                      "Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 100000\r\n\r\n--x\r\n".encode())
            reply = read_reply(s, 10)
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        # and a whole request is still answered
        with served.client() as c:
            assert c.get("/").status_code == 200
    finally:
        served.stop()


# -- a rebuilt index -------------------------------------------------------------


@pytest.fixture
def tiny_cache(tmp_path, monkeypatch, session_cache, tree_2_6, generated):
    """A cache of its own holding one small registered tree (a copy of the
    2.6.0 tree's yaml for relu and its torchgen and tools, and one C++ file),
    indexed; the installed torch's catalog and generated files are the
    session's."""
    from kernelmap.source import add_tree, build_index

    cache = tmp_path / "cache"
    (cache / "catalog").mkdir(parents=True)
    (cache / "codegen").mkdir()
    for f in (session_cache / "catalog").glob("*.sqlite"):
        (cache / "catalog" / f.name).symlink_to(f)
    for d in (session_cache / "codegen").iterdir():
        if d.name.startswith("torch-"):
            (cache / "codegen" / d.name).symlink_to(d, target_is_directory=True)
    root = tmp_path / "tiny"
    native = root / "aten/src/ATen/native"
    native.mkdir(parents=True)
    (root / "version.txt").write_text("2.6.0\n")
    (root / "torchgen").symlink_to(tree_2_6 / "torchgen", target_is_directory=True)
    (root / "tools/autograd").mkdir(parents=True)
    for f in (tree_2_6 / "tools").iterdir():
        if f.name != "autograd":
            (root / "tools" / f.name).symlink_to(f)
    for f in (tree_2_6 / "tools/autograd").iterdir():
        if f.name != "derivatives.yaml":
            (root / "tools/autograd" / f.name).symlink_to(f)
    (root / "tools/autograd/derivatives.yaml").write_text(entries(tree_2_6 / "tools/autograd/derivatives.yaml", "- name: ", ("relu(",)))
    (native / "native_functions.yaml").write_text(entries(tree_2_6 / "aten/src/ATen/native/native_functions.yaml", "- func: ", ("relu(", "relu_(")))
    (native / "tags.yaml").symlink_to(tree_2_6 / "aten/src/ATen/native/tags.yaml")
    (root / "torch/nn").mkdir(parents=True)
    (root / "torch/nn/functional.py").write_text("import torch\n\n\ndef relu(input):\n    return torch.relu(input)\n")
    (native / "Tiny.cpp").write_text("namespace at { namespace native {\nvoid tiny_helper() {}\nvoid tiny_caller() { tiny_helper(); }\n}}\n")
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(cache))
    monkeypatch.delenv("KERNELMAP_SOURCE", raising=False)
    tree = add_tree(root, "tiny")
    build_index(tree, jobs=1)
    return tree


def entries(path: Path, opener: str, names: tuple[str, ...]) -> str:
    """The entries of a yaml list file whose first line starts `opener` + one of `names`."""
    out, keep = [], False
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("- "):
            keep = line.startswith(opener) and line[len(opener):].startswith(names)
        if keep:
            out.append(line)
    return "".join(out)


def test_a_rebuilt_index_is_read(tiny_cache):
    """The defect: after `kernelmap index` added a function the server still
    said "unknown name", from the graph and the page it had kept."""
    from kernelmap.source import build_index
    from kernelmap.web.app import create_app

    with client_of(create_app(source="tiny")) as c:
        r = c.get("/callers", params={"symbol": "at::native::tiny_helper"})
        assert r.status_code == 200 and "tiny_caller" in r.text and "tiny_added" not in r.text
        r = c.get("/callers", params={"symbol": "at::native::tiny_added"})
        assert r.status_code == 400 and "tiny_added" in r.text
        tiny = tiny_cache.root / "aten/src/ATen/native/Tiny.cpp"
        tiny.write_text(tiny.read_text().replace("}}\n", "void tiny_added() { tiny_helper(); }\n}}\n"))
        os.utime(tiny, ns=(time.time_ns() + 2_000_000_000,) * 2)
        build_index(tiny_cache, jobs=1)
        r = c.get("/callers", params={"symbol": "at::native::tiny_helper"})
        assert r.status_code == 200 and "tiny_caller" in r.text and "tiny_added" in r.text
        r = c.get("/callers", params={"symbol": "at::native::tiny_added"})
        assert r.status_code == 200, r.text[-300:]
        # the source view and the search read the new index too
        assert "at::native::tiny_added" in c.get("/api/suggest", params={"q": "tiny_add"}).text


def test_uploads_are_unpacked_in_bounded_memory():
    """A packed upload is unpacked to disk a chunk at a time."""
    from kernelmap.web.store import unpack_to

    data = zlib.compress(b" " * (20 << 20), wbits=31)
    tracemalloc.start()
    try:
        with io.BytesIO(data) as source, tempfile.TemporaryDirectory() as d:
            unpack_to(source, Path(d) / "out.json", 32 << 20)
            assert (Path(d) / "out.json").stat().st_size == 20 << 20
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8e6, peak
