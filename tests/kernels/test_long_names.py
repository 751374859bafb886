"""A kernel name far longer than any real one (a hostile trace holds one 400 MB
name) is read from its first MAX_NAME characters and answered as a name cut
short, so its cost is bounded."""

from __future__ import annotations

from kernelmap.kernels import KernelResolver
from kernelmap.kernels.resolve import MAX_NAME


def test_a_huge_name_is_read_from_its_start_and_marked_cut_short():
    resolver = KernelResolver()
    huge = "ncclKernel_AllReduce_RING_LL_Sum_float" + "k" * (8 * MAX_NAME)
    answer = resolver.resolve(huge)
    assert answer.truncated and answer.name == huge
    assert len(answer.demangled) <= MAX_NAME
    assert answer.library == "NCCL"  # what the start of the name says
    normal = resolver.resolve("ncclKernel_AllReduce_RING_LL_Sum_float")
    assert not normal.truncated and normal.library == "NCCL"


def test_a_long_value_is_read_in_geometrically_growing_steps(tmp_path, monkeypatch):
    """A 32 MB name takes a handful of reads and decodes, not one per 1 MB chunk
    (each retry decodes the value again from its start: chunk by chunk, that is
    quadratic in the value's size)."""
    from kernelmap.trace import reader

    path = tmp_path / "long.json"
    name = "k" * (32 << 20)
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 5, "dur": 2, "name": "'
                    + name + '"}]}')
    reads = []
    opened = reader.open_trace

    def counting(p):
        stream = opened(p)
        real = stream.read

        def read(n=-1):
            reads.append(n)
            return real(n)

        stream.read = read
        return stream

    monkeypatch.setattr(reader, "open_trace", counting)
    events = list(reader.read_trace(path))
    assert [e["name"] for e in events] == [name]
    assert 1 <= len(reads) <= 12, len(reads)  # 1 MB chunks, one at a time, would take 33
