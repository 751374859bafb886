"""The import's memory per event: the arg columns of the collected events are
sparse (Note [sparse arg columns] in kernelmap.trace.collect) and read as
the dense columns they stand for; the peak a further event adds to an
import is bounded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernelmap.trace.codes import NONE, Sparse
from kernelmap.trace.collect import collect, _EMPTY, _ROW_COLUMNS
from kernelmap.trace.reader import read_batches

from tests.trace.test_scale import needs_proc, run_child, write_trace, GPU_TRACE

DENSE_ROW_BYTES = sum(np.dtype(dtype).itemsize for dtype in _ROW_COLUMNS.values())  # every column dense: 97 bytes a row


def test_sparse_column_reads_as_its_dense_column():
    rng = np.random.default_rng(7)
    dense = np.full(1000, NONE, dtype=np.int64)
    some = np.sort(rng.choice(1000, 120, replace=False))
    dense[some] = rng.integers(-5, 1 << 40, len(some))
    col = Sparse(some.astype(np.int32), dense[some], NONE, len(dense))
    assert len(col) == 1000 and col.dtype == dense.dtype and col.shape == dense.shape
    assert np.array_equal(np.asarray(col), dense)
    rows = rng.integers(0, 1000, 5000)
    assert np.array_equal(col[rows], dense[rows])
    assert np.array_equal(col[-rows - 1], dense[-rows - 1])
    mask = rng.random(1000) < 0.3
    assert np.array_equal(col[mask], dense[mask])
    assert np.array_equal(col[10:900:7], dense[10:900:7])
    assert np.array_equal(col[np.zeros(0, np.int64)], dense[np.zeros(0, np.int64)])
    for i in (*some[:5].tolist(), 0, 999, -1, -1000, int(some[0]) + 1):
        assert col[i] == dense[i] and type(col[i]) is type(dense[i])
    for bad in (1000, -1001):
        with pytest.raises(IndexError):
            col[bad]
    with pytest.raises(IndexError):
        col[np.array([3, 1000])]
    empty = Sparse(np.zeros(0, np.int32), np.zeros(0, np.int32), -1, 4)
    assert np.array_equal(np.asarray(empty), np.full(4, -1, np.int32)) and empty[2] == -1


def test_collected_arg_columns_are_sparse_and_smaller():
    c = collect(read_batches(GPU_TRACE))
    rows = len(c.ts)
    assert rows > 10_000
    for name, fill in _EMPTY.items():
        col = c.columns[name]
        assert isinstance(col, Sparse) and len(col) == rows
        dense = np.asarray(col)
        assert np.array_equal(np.flatnonzero(dense != fill), col.rows)  # the rows kept are exactly those holding something
        assert dense.dtype == np.dtype(_ROW_COLUMNS[name])
    held = sum(col.nbytes for col in c.columns.values())
    assert held < 0.75 * DENSE_ROW_BYTES * rows, held / rows


_IMPORT = r"""
import json, sys
def peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
from kernelmap.trace.reader import read_batches
from kernelmap.trace.collect import collect
from kernelmap.trace.build import build
from kernelmap.trace.summary import summarize_table
base = peak_kb()
table = build(collect(read_batches(sys.argv[1])))
summarize_table(table, (), None)
print(json.dumps({"added_kb": peak_kb() - base}))
"""


@needs_proc
def test_import_peak_per_event_is_bounded(tmp_path):
    """The peak memory one more event adds to an import (columns, tree,
    summary), measured between 100,000 and 400,000 events: 117 bytes on this
    trace (137 before the arg columns were sparse and the event columns were
    freed as the tree took them over)."""
    small, large = tmp_path / "small.json", tmp_path / "large.json"
    n_small, n_large = write_trace(small, 20_000), write_trace(large, 80_000)
    a, b = run_child(_IMPORT, str(small)), run_child(_IMPORT, str(large))
    per_event = (b["added_kb"] - a["added_kb"]) * 1024 / (n_large - n_small)
    assert 0 < per_event <= 128, per_event
