"""Fixtures of the HTML and web app tests: the real 2.6.0 tree indexed (shared
with tests/graph), the documents the tests render (a stack, the ResNet-50
trace, a real GPU trace), headless Chromium driven by Playwright, and the app
served on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.graph.conftest import TREE_NAME, context, generated, indexed_tree  # noqa: F401 - shared fixtures

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")
GPU_TRACE = DATA / "alexnet-step.json.gz"
CHROMIUM = "/usr/bin/chromium"
# No network, no background services, a fresh profile per session.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def files(indexed_tree, generated):
    """Every root the app serves: the indexed tree, the generated files, the wheel."""
    from kernelmap.web.files import SourceFiles

    return SourceFiles.discover()


@pytest.fixture(scope="session")
def stack_document(context):
    """`stack torch.nn.Conv2d --device cuda` over the real 2.6.0 tree, its main path marked as the command marks it."""
    from kernelmap import graph
    from kernelmap.api import with_main_path
    from kernelmap.render.json import to_json

    return to_json(with_main_path(graph.stack("torch.nn.Conv2d", context("cuda"))))


@pytest.fixture(scope="session")
def resnet_trace(indexed_tree):
    """examples/resnet50.py traced once (forward, CPU) with its kernels linked
    to the indexed tree."""
    from kernelmap import trace

    t = trace.run_script(str(ROOT / "examples/resnet50.py"), source_tree=TREE_NAME)
    assert t.error is None, t.error
    return t


@pytest.fixture(scope="session")
def resnet_document(resnet_trace):
    """The `trace/2` document `kernelmap trace --json` prints for it."""
    from kernelmap.render.json import to_json

    return {"kernelmap": "trace/2", "tree": to_json(resnet_trace.tree), "summary": resnet_trace.summary().to_json()}


@pytest.fixture(scope="session")
def gpu_document(indexed_tree):
    """A real GPU trace (AlexNet on one GPU) read with the indexed tree."""
    from kernelmap import trace
    from kernelmap.render.json import to_json

    t = trace.load(GPU_TRACE, source_tree=TREE_NAME)
    return {"kernelmap": "trace/2", "tree": to_json(t.tree), "summary": t.summary().to_json()}


def walk(node: dict):
    """(node, ancestors) of a calltree/2 node dict, pre-order, no recursion."""
    stack = [(node, ())]
    while stack:
        n, up = stack.pop()
        yield n, up
        stack.extend((c, up + (n,)) for c in reversed(n.get("children") or ()))


def file_line(files, location: dict) -> str:
    """The line a LOCATION names, read from the file on disk."""
    opened = files.open_location(location)
    assert opened is not None, location
    return opened.text.split("\n")[int(location["line"]) - 1]


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """Headless Debian Chromium (never a downloaded browser), fresh profile."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is not installed: run scripts/install-browser (make test does)")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True, viewport={"width": 1400, "height": 900}
        )
        yield ctx
        ctx.close()


@pytest.fixture
def page(browser, request):
    """A new tab that fails the test on any script error, and whose
    screenshot is saved in the test's output folder."""
    tab = browser.new_page()
    errors: list[str] = []
    dialogs: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    tab.errors = errors
    tab.dialogs = dialogs
    yield tab
    tab.close()
    assert not errors, errors
    assert not dialogs, dialogs


def screenshot(tab, tmp_path: Path, name: str) -> Path:
    out = tmp_path / f"{name}.png"
    tab.screenshot(path=str(out))
    assert out.stat().st_size > 1000
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """An ASGI app made by `create_app`, served by uvicorn on 127.0.0.1 in a
    thread, with the configuration `kernelmap serve` uses. `link(path)` is
    the URL of a page with the app's token in it (what `serve` prints): a
    browser that opens one gets the token's cookie; `client()` is an HTTP
    client that holds that cookie."""

    def __init__(self, app):
        import uvicorn

        from kernelmap.web.guard import cookie_name
        from kernelmap.web.server import config

        self.app = app
        self.token = app.state.token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cookies = {cookie_name(self.port): self.token}
        self.server = uvicorn.Server(config(app, host="127.0.0.1", port=self.port))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the app did not start")
            time.sleep(0.05)

    def link(self, path: str = "/") -> str:
        """`path` on this server, with the token (as `serve` prints it)."""
        return f"{self.url}{path}{'&' if '?' in path else '?'}token={self.token}"

    def client(self, **options) -> httpx.Client:
        options.setdefault("timeout", 300)
        return httpx.Client(base_url=self.url, cookies=self.cookies, **options)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session")
def app_server(files):
    """The app over the real roots, on 127.0.0.1."""
    from kernelmap.web.app import create_app

    served = Served(create_app(files, source=TREE_NAME))
    yield served
    served.stop()


def apply_search(tab, text: str) -> None:
    """Type `text` in a tree's search box and wait until the tree shows its hits."""
    tab.fill("[data-testid=tree-search]", text)
    tab.wait_for_function(
        "q => document.querySelector('[data-testid=tree]').getAttribute('data-applied') === q + '|||'", arg=text.strip().lower()
    )


def pick_hit(tab, label: str) -> None:
    """Click the first hit row whose name is exactly `label`."""
    rows = tab.locator(".row.hit")
    for i in range(rows.count()):
        if rows.nth(i).locator(".name").inner_text() == label:
            rows.nth(i).click()
            return
    raise AssertionError(f"no hit named {label!r}")
