"""Fetching a commit's archive from a local HTTP server that serves tarballs
shaped like GitHub's (a pax global header whose comment is the commit)."""

from __future__ import annotations

import errno
import gzip
import http.server
import io
import shutil
import tarfile
import threading
import time

import pytest

from kernelmap.source import FetchError, fetch_tree, list_trees
from kernelmap.source.fetch import is_kept, trees_dir

SHA = "2236df1770800ffea5697b11b0bb0d910b2e59e1"
OTHER = "1eba9b3aa3c43f86f4a2c807ac8e12c4a7767340"

FILES = {
    "version.txt": "2.6.0a0\n",
    "aten/src/ATen/native/Add.cpp": "namespace at::native { int add() { return 1; } }\n",
    "c10/core/Device.h": "#pragma once\n",
    "torch/csrc/Module.cpp": "int m() { return 0; }\n",
    "torch/functional.py": "x = 1\n",
    "torch/nn/modules/conv.py": "y = 2\n",
    "tools/autograd/derivatives.yaml": "- name: add\n",
    "torchgen/model.py": "z = 3\n",
    "docs/index.rst": "docs\n",
    "test/test_nn.py": "t = 4\n",
}


def make_archive(commit: str | None, files=FILES) -> bytes:
    top = f"pytorch-{commit or 'x'}"
    buf = io.BytesIO()
    pax = {"comment": commit} if commit else {}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers=pax) as tf:
        d = tarfile.TarInfo(top)
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo(f"{top}/aten/evil")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tf.addfile(link)
    return gzip.compress(buf.getvalue())


class Server:
    """Serves `routes[path] = (bytes, mode)` on 127.0.0.1; mode is "ok",
    "truncate" (announce all, send half, close) or "stall" (send half, hang)."""

    def __init__(self):
        self.routes: dict[str, tuple[bytes, str]] = {}
        routes = self.routes

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                entry = routes.get(self.path)
                if entry is None:
                    self.send_error(404)
                    return
                data, mode = entry
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if mode == "ok":
                    self.wfile.write(data)
                    return
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                if mode == "stall":
                    time.sleep(3)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/archive"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(monkeypatch, cache):
    s = Server()
    monkeypatch.setenv("KERNELMAP_ARCHIVE_URL", s.url)
    yield s
    s.close()


def leftovers():
    d = trees_dir()
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_kept_paths():
    assert is_kept("aten/src/ATen/native/Add.cpp") and is_kept("torch/functional.py") and is_kept("version.txt")
    assert not is_kept("torch/nn/modules/conv.py") and not is_kept("docs/index.rst") and not is_kept("torch/csrc")


def test_fetch_keeps_the_indexed_parts_and_registers_the_tree(server):
    server.routes[f"/archive/{SHA}.tar.gz"] = (make_archive(SHA), "ok")
    seen = []
    tree = fetch_tree(SHA, progress=lambda done, total: seen.append((done, total)))
    assert (tree.version, tree.commit, tree.kind) == ("2.6.0a0", SHA, "fetched")
    kept = sorted(str(p.relative_to(tree.root)) for p in tree.root.rglob("*") if p.is_file() and p.name != ".complete")
    assert kept == sorted(rel for rel in FILES if is_kept(rel))
    assert not (tree.root / "aten/evil").exists()
    assert seen and seen[-1][0] == seen[-1][1]
    assert [t.name for t in list_trees()] == [tree.name]
    assert tree.origin.commit == SHA
    # A second fetch reuses the tree without downloading.
    del server.routes[f"/archive/{SHA}.tar.gz"]
    assert fetch_tree(SHA) == tree


def test_remove_deletes_the_fetched_folder_and_nothing_a_registry_entry_names_instead(server):
    import json

    from kernelmap import env
    from kernelmap.source import remove_tree
    from kernelmap.source.trees import registry_path

    server.routes[f"/archive/{SHA}.tar.gz"] = (make_archive(SHA), "ok")
    tree = fetch_tree(SHA)
    precious = env.cache_dir() / "precious"
    precious.mkdir()
    (precious / "file").write_text("keep")
    data = json.loads(registry_path().read_text())
    data["trees"].append({"name": "evil", "root": str(env.cache_dir()), "version": "2.6.0", "commit": "a" * 40, "kind": "fetched"})
    registry_path().write_text(json.dumps(data))
    remove_tree("evil")
    assert (precious / "file").read_text() == "keep" and tree.root.is_dir()
    remove_tree(tree.name)
    assert not tree.root.exists() and (precious / "file").read_text() == "keep"


def test_the_default_commit_is_the_installed_torch(server, monkeypatch, tmp_path):
    from kernelmap import env

    monkeypatch.setattr(env, "torch_install", lambda: env.TorchInstall("2.6.0", SHA, None, tmp_path))
    server.routes[f"/archive/{SHA}.tar.gz"] = (make_archive(SHA), "ok")
    assert fetch_tree().commit == SHA


@pytest.mark.parametrize(
    "archive, mode, message",
    [
        (lambda: make_archive(OTHER), "ok", "is of commit " + OTHER),
        (lambda: make_archive(None), "ok", "names no commit"),
        (lambda: b"not a tarball at all", "ok", "incomplete or not a .tar.gz"),
        (lambda: make_archive(SHA), "truncate", "incomplete|ended after"),
        (lambda: make_archive(SHA, {**FILES, "aten/big.bin": "x" * 2_000_000}), "stall", "timed out"),
        (lambda: make_archive(SHA, {k: v for k, v in FILES.items() if k != "version.txt"}), "ok", "no version.txt"),
    ],
)
def test_a_bad_download_leaves_nothing_behind(server, archive, mode, message):
    server.routes[f"/archive/{SHA}.tar.gz"] = (archive(), mode)
    with pytest.raises(FetchError, match=message):
        fetch_tree(SHA, timeout=1)
    assert leftovers() == []
    assert list_trees() == []


def test_http_errors_and_bad_commits(server):
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch_tree(SHA)
    from kernelmap.errors import BadInput

    with pytest.raises(BadInput, match="hex digits"):
        fetch_tree("main; rm -rf /")
    assert leftovers() == []


def test_a_full_disk_leaves_nothing_behind(server, monkeypatch):
    server.routes[f"/archive/{SHA}.tar.gz"] = (make_archive(SHA), "ok")
    calls = []
    copy = shutil.copyfileobj

    def full_disk(src, dst, length=0):
        """The third file written finds the disk full."""
        calls.append(dst)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return copy(src, dst, length)

    monkeypatch.setattr("kernelmap.source.fetch.shutil.copyfileobj", full_disk)
    with pytest.raises(FetchError, match="disk is full"):
        fetch_tree(SHA)
    assert leftovers() == []


# -- limits and identity (hostile archives) ------------------------------------


def _archive_of_one_big_kept_file(size: int) -> bytes:
    """A tiny .tar.gz that unpacks one kept file of `size` zero bytes."""
    buf = io.BytesIO()
    top = f"pytorch-{SHA}"
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": SHA}) as tf:
        data = b"2.6.0a0\n"
        info = tarfile.TarInfo(f"{top}/version.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(f"{top}/aten/src/ATen/Big.cpp")
        info.size = size
        tf.addfile(info, io.BytesIO(bytes(size)))
    return gzip.compress(buf.getvalue())


def test_a_member_over_the_size_limit_is_refused_and_nothing_is_left(server, monkeypatch):
    from kernelmap.source import fetch

    monkeypatch.setattr(fetch, "MAX_MEMBER_BYTES", 1 << 20)
    archive = _archive_of_one_big_kept_file(4 << 20)
    assert len(archive) < 64 << 10  # a small download that would write megabytes
    server.routes[f"/archive/{SHA}.tar.gz"] = (archive, "ok")
    with pytest.raises(FetchError, match="more than 1 MB"):
        fetch_tree(SHA)
    assert leftovers() == [] and list_trees() == []


def test_too_many_members_or_too_much_unpacked_is_refused(server, monkeypatch):
    from kernelmap.source import fetch

    server.routes[f"/archive/{SHA}.tar.gz"] = (make_archive(SHA), "ok")
    monkeypatch.setattr(fetch, "MAX_MEMBERS", len(FILES) - 2)
    with pytest.raises(FetchError, match="members"):
        fetch_tree(SHA)
    monkeypatch.setattr(fetch, "MAX_MEMBERS", 10_000)
    monkeypatch.setattr(fetch, "MAX_ARCHIVE_BYTES", 20)
    with pytest.raises(FetchError, match="unpacks to more than"):
        fetch_tree(SHA)
    assert leftovers() == []


def test_complete_is_trusted_only_with_the_full_commit(server):
    server.routes[f"/archive/{SHA}.tar.gz"] = (make_archive(SHA), "ok")
    tree = fetch_tree(SHA)
    assert tree.commit == SHA
    # A record that is no full commit: fetched again, not believed.
    (tree.root / ".complete").write_text(SHA[:12] + "\n")
    again = fetch_tree(SHA)
    assert again.commit == SHA and (again.root / ".complete").read_text().strip() == SHA
    # Another commit sharing the 12-digit directory name is never taken for this one.
    collide = SHA[:12] + "f" * 28
    with pytest.raises(FetchError, match=f"holds commit {SHA}"):
        fetch_tree(collide)


def test_an_archive_naming_a_short_commit_is_refused(server):
    server.routes[f"/archive/{SHA}.tar.gz"] = (make_archive(SHA[:12]), "ok")
    with pytest.raises(FetchError, match="is of commit"):
        fetch_tree(SHA)
    assert leftovers() == []


@pytest.mark.parametrize("timeout", [-1.0, 0.0, float("nan"), float("inf"), 1e9])
def test_timeout_must_be_finite_and_positive(cache, timeout):
    from kernelmap.errors import BadInput

    with pytest.raises(BadInput, match="--timeout"):
        fetch_tree(SHA, timeout=timeout)


def test_an_archive_url_without_a_scheme_is_bad_input(cache, monkeypatch):
    from kernelmap.errors import BadInput

    monkeypatch.setenv("KERNELMAP_ARCHIVE_URL", "example.org/archive")
    with pytest.raises(BadInput, match="KERNELMAP_ARCHIVE_URL"):
        fetch_tree(SHA)
    assert leftovers() == []


def test_an_archive_s_oversized_metadata_is_refused_before_it_is_read(server):
    """A pax header is read whole into memory: one of 600 MB in a 0.6 MB
    archive took 1.8 GB. Above MAX_HEADER_BYTES it is refused by its size."""
    from kernelmap.source.fetch import MAX_HEADER_BYTES

    top = f"pytorch-{SHA}"
    buf = io.BytesIO()
    pax = {"comment": SHA, "padding": "x" * (MAX_HEADER_BYTES + 1024)}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers=pax) as tf:
        info = tarfile.TarInfo(f"{top}/version.txt")
        info.size = 8
        tf.addfile(info, io.BytesIO(b"2.6.0a0\n"))
    archive = gzip.compress(buf.getvalue())
    assert len(archive) < 64 << 10  # metadata that compresses to almost nothing
    server.routes[f"/archive/{SHA}.tar.gz"] = (archive, "ok")
    with pytest.raises(FetchError, match=r"holds a header of \d+ bytes \(more than 1 MB of metadata for one member\)"):
        fetch_tree(SHA)
    assert leftovers() == [] and list_trees() == []
