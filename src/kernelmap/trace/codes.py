"""The codes the trace's columns hold: node kinds and event categories as
small ints, ids encoded into int64 (Note [encoded ids]), labels and pooled
values stored once and referred to by index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
from msgspec import Raw

from kernelmap.model import Location
from kernelmap.trace.events import HOST_CATEGORIES


KINDS = ("trace", "thread", "python", "module", "builtin", "op", "autograd", "annotation", "runtime", "gpu_kernel", "gpu_memcpy", "gpu_memset")
KIND = {k: i for i, k in enumerate(KINDS)}
CATEGORIES = ("python_function", "user_annotation", "cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset")
CAT = {c: i for i, c in enumerate(CATEGORIES)}
_FIRST_DEVICE_CAT = CAT["kernel"]
_CAT_RANK = np.array([HOST_CATEGORIES.get(c, 9) for c in CATEGORIES], dtype=np.int8)
_FRAMES = np.array([KIND["python"], KIND["module"], KIND["builtin"]], dtype=np.int8)
DEVICE_KINDS = np.array([KIND["gpu_kernel"], KIND["gpu_memcpy"], KIND["gpu_memset"]], dtype=np.int8)
LINKS = (None, "correlation", "flow", "external id")  # how a device event was hung under its launch

# Note [encoded ids]
# Correlations, external ids, sequence numbers, devices and streams are
# JSON ints or strings. They are kept as int64 columns: an int of the usual
# range as itself, an absent value as NONE, anything else (a string, an int
# beyond the range) as a code below _ODD that stands for the value kept
# aside in `Values.odd`. Equal values get equal codes, so joins compare codes.
NONE = -(1 << 63)
_SOME = NONE + 1  # present, but no int or string (a list where a sequence number belongs)
_ODD = -(1 << 62)


class Values:
    """The values of encoded id columns that are not plain ints (Note [encoded ids])."""

    def __init__(self) -> None:
        self.odd: list[Any] = []
        self._codes: dict[Any, int] = {}

    def _code(self, v: Any) -> int:
        if v is None:
            return NONE
        if not isinstance(v, (int, str)):
            return _SOME
        key = (str if isinstance(v, str) else int, v)  # "5" and 5 stay apart
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = NONE + 2 + len(self.odd)
            self.odd.append(v)
        return code

    def encode(self, values: list[Any]) -> np.ndarray:
        if values and values[0] is None:  # a column most events of a category lack: counted by identity, no failed conversion
            absent = values.count(None)
            if absent == len(values):
                return np.full(len(values), NONE, dtype=np.int64)
        try:  # the common case: every value an int
            out = np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            try:  # the next most common: ints, some absent (an arg one category of events has and another not)
                if None not in values:
                    raise TypeError
                out = np.array([NONE if v is None else v for v in values], dtype=np.int64)
            except (TypeError, ValueError, OverflowError):
                code = self._code  # bools read as ints, as numpy reads them (and a dict: True == 1)
                out = np.array([v if isinstance(v, int) and _ODD < v < -_ODD else code(v) for v in values], dtype=np.int64)
        if len(out) and out.min() < _ODD:
            for i in np.flatnonzero((out < _ODD) & (out > _SOME)).tolist():  # an int that falls among the codes: kept aside too
                if isinstance(values[i], int):
                    out[i] = self._code(values[i])
        return out

    def decode(self, code: int) -> Any:
        """The value a code stands for; None for none, or for one of no usable type."""
        if code >= _ODD:
            return int(code)
        if code == NONE or code == _SOME:
            return None
        return self.odd[code - NONE - 2]


def usable(codes: np.ndarray) -> np.ndarray:
    """Which codes stand for an int or a string."""
    return (codes != NONE) & (codes != _SOME)


def combine(*columns: np.ndarray) -> np.ndarray:
    """One non-negative int64 key per row of equal-length int columns: equal rows, equal keys."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    span = 1
    for col in columns:
        col = col.astype(np.int64) - (int(col.min()) if len(col) else 0)
        width = int(col.max()) + 1 if len(col) else 1
        if span * width >= 1 << 62:  # too wide to multiply out: number the distinct keys so far
            key = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
            span = int(key.max()) + 1 if len(key) else 1
            if span * width >= 1 << 62:
                col = np.unique(col, return_inverse=True)[1].reshape(-1).astype(np.int64)
                width = int(col.max()) + 1 if len(col) else 1
        key = key * width + col
        span *= width
    return key


def climb(nodes: np.ndarray, kind: np.ndarray, parent: np.ndarray, through) -> np.ndarray:
    """Per node of `nodes`, its nearest ancestor whose kind is not in `through` (-1: none)."""
    table = np.zeros(max([int(kind.max()) + 1 if len(kind) else 1, *(k + 1 for k in through)]), dtype=bool)
    table[list(through)] = True
    out = np.empty(len(nodes), dtype=np.int64)
    for lo in range(0, len(nodes), _CLIMB):  # a block of nodes at a time: no index array as long as `nodes`
        above = parent[nodes[lo : lo + _CLIMB]].astype(np.int64)
        climbing = np.flatnonzero(above >= 0)
        while len(climbing):
            climbing = climbing[table[kind[above[climbing]]]]
            above[climbing] = parent[above[climbing]]
            climbing = climbing[above[climbing] >= 0]
        out[lo : lo + len(above)] = above
    return out


_CLIMB = 1 << 16


def first_seen(keys: np.ndarray, inverse: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct keys (non-negative) in order of first appearance: (the
    position of each one's first appearance, how often each appears, and per
    position the number of its key in that order; with `inverse` False, an
    empty array for that: where the keys are dense, none is made). Without
    sorting the keys where they are dense."""
    n = len(keys)
    if not n:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    top = int(keys.max()) + 1
    small = np.int32 if n < 1 << 31 else np.int64  # positions and ranks: int32 where they fit (a dense table is up to 4n long)
    if top <= 4 * n + 1024:
        first = np.full(top, n, dtype=small)
        np.minimum.at(first, keys, np.arange(n, dtype=small))
        distinct = np.flatnonzero(first < n)
    else:
        distinct, at = np.unique(keys, return_index=True)
        first = np.zeros(0, dtype=np.int64)
        first_of = at
    firsts = first[distinct].astype(np.int64) if len(first) else first_of
    del first
    order = np.argsort(firsts, kind="stable")
    if not inverse and len(distinct) and top <= 4 * n + 1024:  # the counts read per key: no number per position
        return firsts[order], np.bincount(keys, minlength=top)[distinct[order]], np.zeros(0, dtype=np.int64)
    if len(distinct) and top <= 4 * n + 1024:
        rank = np.empty(top, dtype=small)
        rank[distinct[order]] = np.arange(len(order))
        inverse = rank[keys].astype(np.int64)
    else:
        inverse = np.searchsorted(distinct, keys)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        inverse = rank[inverse]
    return firsts[order], np.bincount(inverse, minlength=len(order)), inverse


@dataclass
class Labels:
    """What a trace event's (name, category) pair is, once per distinct pair:
    its kind, the name it shows, its Python location and its raw name."""

    raw: list[str] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    display: list[str] = field(default_factory=list)
    location: list[Location | None] = field(default_factory=list)
    ids: dict[tuple[Any, Any], int] = field(default_factory=dict)

    def add(self, raw: str, kind: str, display: str, location: Location | None = None) -> int:
        self.raw.append(raw)
        self.kind.append(KIND[kind])
        self.display.append(display)
        self.location.append(location)
        return len(self.raw) - 1


class Pool:
    """Shapes, dtype lists, grids and blocks: each distinct one stored once.
    The reader hands them over as raw JSON (msgspec.Raw), interned by their
    text and decoded once; a dict event's are Python values."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._ids: dict[Any, int] = {}
        self._texts: dict[Any, dict[bytes, int]] = {}

    def encode(self, values: list[Any], raw: bool, check=None) -> np.ndarray:
        """Ids of `values` (-1 for none); `raw`: they are raw JSON or None, no
        Python values. `check(value)` says whether a value has the type its
        column holds (a list of shapes, of dtype names): one that has not is
        kept as none, as if the trace had not recorded it."""
        seen = self._texts.setdefault(check, {})  # a text's id per check: "[1, 1]" is a grid, but no list of dtype names
        texts = seen.get
        add = self._add if check is None else (lambda v: self._add(v) if check(v) else -2)
        try:  # the common case: raw JSON only (bytes(None) raises)
            if not raw:
                raise TypeError
            out = list(map(texts, map(bytes, values)))
        except TypeError:  # absent values, or a dict event's Python values
            out = [texts(bytes(v)) if type(v) is Raw else (-2 if v is None else add(v)) for v in values]
        if None in out:
            for i, x in enumerate(out):  # first sightings of a text
                if x is None:  # (a text seen first in this window is decoded once, not at each of its events)
                    text = bytes(values[i])
                    x = seen.get(text)
                    out[i] = x if x is not None else seen.setdefault(text, add(msgspec.json.decode(text)))
        codes = np.array(out, dtype=np.int32)
        codes[codes < -1] = -1
        return codes

    def _add(self, v: Any) -> int:
        if v is None:
            return -2
        if type(v) is list:  # arrays one level down are tuples too: shapes are hashable
            v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
        try:
            i = self._ids.get(v)
        except TypeError:  # a list two levels down: kept as it is
            self.items.append(v)
            return len(self.items) - 1
        if i is None:
            i = self._ids[v] = len(self.items)
            self.items.append(v)
        return i

    def get(self, i: int) -> Any:
        return None if i < 0 else self.items[i]


def plain(value: Any) -> Any:
    """A value of the reader's records as Python data (raw JSON decoded)."""
    return msgspec.json.decode(bytes(value)) if type(value) is Raw else value


class Sparse:
    """A column of the collected events most of whose rows hold one value
    (`fill`): only the other rows and their values, sorted by row (Note
    [sparse arg columns] in kernelmap.trace.collect). Indexed like the dense
    column it stands for (by an int, an array of rows or a mask); `np.asarray`
    makes that dense column."""

    __slots__ = ("rows", "values", "fill", "size")

    def __init__(self, rows: np.ndarray, values: np.ndarray, fill: Any, size: int):
        self.rows = rows  # ascending
        self.values = values
        self.fill = fill
        self.size = size

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.values.nbytes

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            k = int(key) + (self.size if key < 0 else 0)
            if not 0 <= k < self.size:
                raise IndexError(f"index {key} is out of bounds for a column of {self.size} rows")
            at = int(np.searchsorted(self.rows, k))
            return self.values[at] if at < len(self.rows) and self.rows[at] == k else self.values.dtype.type(self.fill)
        if isinstance(key, slice):
            key = np.arange(self.size)[key]
        key = np.asarray(key)
        if key.dtype == np.bool_:
            key = np.flatnonzero(key)
        out = np.full(key.shape, self.fill, dtype=self.values.dtype)
        if len(self.rows) and key.size:
            k = np.where(key < 0, key + self.size, key)
            if k.size and (k.min() < 0 or k.max() >= self.size):
                raise IndexError(f"an index is out of bounds for a column of {self.size} rows")
            at = np.minimum(np.searchsorted(self.rows, k), len(self.rows) - 1)
            hit = self.rows[at] == k
            out[hit] = self.values[at[hit]]
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.full(self.size, self.fill, dtype=self.values.dtype)
        out[self.rows] = self.values
        return out if dtype is None else out.astype(dtype)
