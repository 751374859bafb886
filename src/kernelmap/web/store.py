"""What the app keeps between requests, bounded: rendered pages and the
traces imported in this session in least-recently-used stores limited by
count and by bytes, and an upload unpacked to a file with a limit on its
unpacked size (a small gzip file can unpack to gigabytes).

An imported trace lives in the trace store (`kernelmap.trace.store`: its
tables in the cache, bounded by bytes, opened by id); the app keeps of it
only its id, the name it was uploaded as and the GPU kernel names its
summary lists, for the search box. Its pages are rendered from the store
when asked, and kept with the other pages.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Generic, TypeVar

from kernelmap.errors import BadInput

V = TypeVar("V")
CHUNK = 1 << 20  # bytes read, and unpacked, at a time


class TooLarge(BadInput):
    """An upload larger than the app's limit, packed or unpacked."""


class Bounded(Generic[V]):
    """key -> value, at most `count` values and `size` bytes in all (each
    value's size is given when it is put); the least recently used go first.
    A value larger than `size` on its own is not kept."""

    def __init__(self, count: int, size: int):
        self.count, self.size = count, size
        self._items: OrderedDict[str, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: str, value: V, size: int) -> list[tuple[str, V]]:
        """Keep `value`; the (key, value) pairs dropped to make room."""
        dropped: list[tuple[str, V]] = []
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.size:
                return dropped
            self._items[key] = (value, size)
            self._bytes += size
            while len(self._items) > self.count or self._bytes > self.size:
                k, (v, n) = self._items.popitem(last=False)
                self._bytes -= n
                dropped.append((k, v))
        return dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes

    def items(self) -> list[tuple[str, V]]:
        with self._lock:
            return [(k, v) for k, (v, _) in self._items.items()]


class Pages(Bounded[bytes]):
    """Rendered pages by key (their UTF-8 text)."""

    def put_text(self, key: str, text: str) -> bytes:
        data = text.encode()
        self.put(key, data, len(data))
        return data


@dataclass(frozen=True)
class ImportedTrace:
    name: str  # what was uploaded (its file name)
    kernels: tuple[str, ...]  # the GPU kernel names its summary lists


class Traces:
    """Traces imported in this session, by their id in the trace store, bounded
    (see the module's docstring)."""

    def __init__(self, count: int = 16, size: int = 16 * 1024 * 1024):
        self._store: Bounded[ImportedTrace] = Bounded(count, size)

    def add(self, tid: str, name: str, kernels: Iterable[str]) -> str:
        kept = ImportedTrace(name, tuple(dict.fromkeys(kernels)))
        self._store.put(tid, kept, len(name) + sum(len(k) for k in kept.kernels))
        return tid

    def get(self, tid: str) -> ImportedTrace | None:
        return self._store.get(tid)

    def names(self) -> dict[str, str]:
        """Trace id -> name, most recently used last."""
        return {tid: t.name for tid, t in self._store.items()}

    def kernels(self) -> list[tuple[str, str]]:
        """(kernel name, trace id) of every kept trace."""
        return [(k, tid) for tid, t in self._store.items() for k in t.kernels]

    def __len__(self) -> int:
        return len(self._store)

    @property
    def bytes(self) -> int:
        return self._store.bytes


def unpack_to(source: BinaryIO, target: Path, limit: int) -> None:
    """Write what `source` holds to `target`, unpacked when it is gzip (one
    member or several), refusing with TooLarge once the text passes `limit`
    bytes: nothing beyond the limit is ever held or written."""
    packed = source.read(2) == b"\x1f\x8b"
    source.seek(0)
    parts = _inflated(source) if packed else iter(lambda: source.read(CHUNK), b"")
    written = 0
    with open(target, "wb") as out:
        for part in parts:
            written += len(part)
            if written > limit:
                raise TooLarge(f"the trace {'unpacks to' if packed else 'is'} more than the limit of {limit // (1024 * 1024)} MB")
            out.write(part)


def _inflated(source: BinaryIO) -> Iterator[bytes]:
    """The unpacked bytes of a gzip stream, at most CHUNK at a time."""
    data = b""
    inflate = None
    while True:
        if not data:
            data = source.read(CHUNK)
            if not data:
                break
        if inflate is None:
            data = data.lstrip(b"\x00")  # padding between members
            if not data:
                continue
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            part = inflate.decompress(data, CHUNK)
        except zlib.error as e:
            raise BadInput(f"the upload is not a well-formed gzip file ({e})") from None
        data = inflate.unconsumed_tail
        if part:
            yield part
        if inflate.eof:
            data, inflate = inflate.unused_data + data, None
    while inflate is not None and not inflate.eof:  # the input is all read: what zlib still holds
        try:
            part = inflate.decompress(b"", CHUNK)
        except zlib.error as e:
            raise BadInput(f"the upload is not a well-formed gzip file ({e})") from None
        if not part:
            raise BadInput("the upload is a truncated gzip file")
        yield part
