"""Chrome/Kineto trace files -> a stream of event dicts, with bounded memory.

A trace exported by `torch.profiler` is one JSON object whose `traceEvents`
array holds every event; it can be hundreds of megabytes. `read_trace` walks
the top-level object itself and decodes one event at a time with the C
decoder (`json.JSONDecoder.raw_decode`) from a sliding text buffer, so memory
is bounded by the largest single event plus one chunk, not by the file.
`.json.gz` files are decompressed as they are read.

`read_batches` is the fast form the tree builder uses: it decodes a whole
window of events at once with msgspec into small typed records that keep
only the fields kernelmap uses (Note [fast event windows]), and hands them
on a window at a time; `read_events` gives the same records one by one.

Errors name the byte offset (in the uncompressed text) where reading stopped:
a truncated file, a malformed event, or a file that is no trace at all.
"""

from __future__ import annotations

import codecs
import gzip
import zlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from kernelmap.errors import KernelmapError

CHUNK = 1 << 20  # bytes read at a time
_WS = " \t\r\n"


class TraceFormatError(KernelmapError):
    """A trace file that is not well-formed Chrome trace JSON (malformed or truncated)."""

    def __init__(self, path: str, offset: int | None, what: str):
        self.path = path
        self.offset = offset  # None where the reader cannot tell (an event judged after it was read)
        super().__init__(f"{path}: {what}" + (f" at byte {offset}" if offset is not None else ""))


@dataclass
class TraceHeader:
    """The top-level fields of a trace other than `traceEvents` (schemaVersion,
    deviceProperties, baseTimeNanoseconds, ...), filled in as they are read."""

    fields: dict[str, Any] = field(default_factory=dict)


def open_trace(path: Path) -> BinaryIO:
    """The file's bytes, decompressed when it is gzip (by magic, not by name)."""
    f = open(path, "rb")
    magic = f.read(2)
    f.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f)  # type: ignore[return-value]
    return f


def _inflated_before_break(stream: gzip.GzipFile) -> int:
    """How many bytes a broken gzip file decompresses to before it breaks
    (GzipFile.read loses the part of a read that precedes the break)."""
    raw = stream.fileobj
    count = 0
    try:
        raw.seek(0)
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while chunk := raw.read(1 << 20):
            while chunk:
                count += len(inflate.decompress(chunk))
                chunk = inflate.unused_data if inflate.eof else b""
                if inflate.eof:  # a file of several gzip members
                    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    except (OSError, zlib.error):
        pass
    return count


class _Buffer:
    """A window of decoded text over a byte stream, tracking the byte offset of
    its first character so errors can point into the file."""

    def __init__(self, stream: BinaryIO, path: str):
        self.stream = stream
        self.path = path
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.text = ""
        self.pos = 0
        self.base = 0  # byte offset of text[0]
        self.dropped = 0  # characters consumed and dropped before text[0]
        self.eof = False

    def offset(self, pos: int | None = None) -> int:
        p = self.pos if pos is None else pos
        return self.base + len(self.text[:p].encode("utf-8"))

    def fail(self, what: str, pos: int | None = None) -> TraceFormatError:
        return TraceFormatError(self.path, self.offset(pos), what)

    def more(self, grow: bool = False) -> bool:
        """Read another chunk; False at end of file. With `grow`, read at least
        as much again as the text not yet consumed: a value longer than a chunk
        (a 400 MB string) is then decoded O(log n) times, not once per chunk."""
        if self.eof:
            return False
        try:
            data = self.stream.read(max(CHUNK, len(self.text) - self.pos) if grow else CHUNK)
        except (OSError, EOFError, zlib.error) as e:  # a broken gzip stream (a cut, flipped bits): where its data breaks
            if isinstance(self.stream, gzip.GzipFile):
                raise TraceFormatError(self.path, None, f"unreadable data ({e}) after byte {_inflated_before_break(self.stream)} "
                                       "of the decompressed data") from None
            raise TraceFormatError(self.path, self.base + len(self.text.encode("utf-8")), f"unreadable data ({e})") from None
        if self.pos > 0:  # drop what has been consumed
            self.base += len(self.text[: self.pos].encode("utf-8"))
            self.dropped += self.pos
            self.text = self.text[self.pos :]
            self.pos = 0
        try:
            self.text += self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as e:
            raise TraceFormatError(self.path, self.offset(len(self.text)) + e.start, "invalid UTF-8") from None
        except (OSError, EOFError) as e:  # a broken gzip stream
            raise TraceFormatError(self.path, self.offset(len(self.text)), f"unreadable data ({e})") from None
        if not data:
            self.eof = True
        return True

    def skip_ws(self) -> str:
        """The next non-blank character ('' at end of file), not consumed."""
        while True:
            text, n = self.text, len(self.text)
            p = self.pos
            while p < n and text[p] in _WS:
                p += 1
            self.pos = p
            if p < n:
                return text[p]
            if not self._read_more():
                return ""

    def _read_more(self, grow: bool = False) -> bool:
        try:
            return self.more(grow)
        except (OSError, EOFError, zlib.error) as e:
            raise self.fail(f"unreadable data ({e})") from None

    def expect(self, ch: str, what: str) -> None:
        got = self.skip_ws()
        if got != ch:
            raise self.fail(f"expected {what}, found {_describe(got)}")
        self.pos += 1

    def value(self, decode, what: str) -> Any:
        """Decode one JSON value at the cursor, reading more text as needed."""
        self.skip_ws()
        while True:
            # Keep a margin so a value is never cut by the buffer's end, except at EOF.
            if not self.eof and len(self.text) - self.pos < CHUNK // 4:
                self._read_more()
                continue
            try:
                obj, end = decode(self.text, self.pos)
            except RecursionError:
                raise self.fail(f"{what} is nested too deeply") from None
            except json.JSONDecodeError as e:
                if not self.eof and self._read_more(grow=True):
                    continue  # the value may run past the buffer: retry with (geometrically) more text
                # At the end of the file, a value cut short is a truncated file:
                # an unterminated string runs to the end, other errors sit at it.
                if e.msg.startswith("Unterminated string") or e.pos >= len(self.text.rstrip()):
                    raise self.fail(f"truncated: the file ends inside {what}", len(self.text)) from None
                raise self.fail(f"malformed JSON in {what} ({e.msg})", e.pos) from None
            self.pos = end
            return obj


def _describe(ch: str) -> str:
    return "end of file (truncated?)" if ch == "" else repr(ch)


def read_trace(path: Path | str, header: TraceHeader | None = None) -> Iterator[dict]:
    """The events of the trace at `path`, one dict at a time, in file order.

    `header`, when given, receives the other top-level fields as they are
    passed (those after `traceEvents` only once the events are exhausted).
    A bare JSON array of events (the older Chrome format) is accepted too.
    """
    return _read(path, header, _events)


def read_events(path: Path | str, header: TraceHeader | None = None) -> Iterator[Event | Loose]:
    """The events of the trace at `path` as `Event` records (or, for an event
    whose fields have unexpected types, `Loose` over its dict), in file order;
    the same errors as `read_trace`."""
    for batch in read_batches(path, header):
        yield from batch


def read_batches(path: Path | str, header: TraceHeader | None = None) -> Iterator[list[Event | Loose]]:
    """`read_events` a window at a time: lists of records, in file order (a
    `Mixed` list when some record did not fit `Event`)."""
    return _read(path, header, _fast_events)


def _read(path: Path | str, header: TraceHeader | None, events) -> Iterator[Any]:
    path = Path(path)
    header = header if header is not None else TraceHeader()
    name = path.name
    try:
        stream = open_trace(path)
    except OSError as e:
        raise TraceFormatError(name, None, f"cannot open ({e.strerror})") from None
    with stream:
        buf = _Buffer(stream, name)
        decode = json.JSONDecoder().raw_decode
        first = buf.skip_ws()
        if first == "\ufeff":  # a byte order mark, as some editors and Windows tools write UTF-8: not part of the JSON
            buf.pos += 1
            first = buf.skip_ws()
        if first == "[":
            buf.pos += 1
            yield from events(buf, decode)
            return
        if first != "{":
            raise buf.fail(f"not a Chrome trace: expected '{{' or '[', found {_describe(first)}")
        buf.pos += 1
        seen_events = False
        if buf.skip_ws() == "}":
            buf.pos += 1
        else:
            while True:
                key = buf.value(decode, "a key")
                if not isinstance(key, str):
                    raise buf.fail("malformed object: keys are strings")
                buf.expect(":", "':'")
                if key == "traceEvents":
                    buf.expect("[", "the traceEvents array")
                    seen_events = True
                    yield from events(buf, decode)
                else:
                    header.fields[key] = buf.value(decode, f"the value of {key!r}")
                c = buf.skip_ws()
                if c == ",":
                    buf.pos += 1
                    continue
                if c == "}":
                    buf.pos += 1
                    break
                raise buf.fail(f"expected ',' or '}}' after {key!r}, found {_describe(c)}")
        if buf.skip_ws() != "":
            raise buf.fail("unexpected text after the trace object")
        if not seen_events:
            raise TraceFormatError(name, buf.offset(), "not a Chrome trace: no traceEvents array before the end")


def _events(buf: _Buffer, decode) -> Iterator[dict]:
    """The elements of an array whose '[' has been consumed, through its ']'."""
    if buf.skip_ws() == "]":
        buf.pos += 1
        return
    while True:
        yield _one_event(buf, decode)
        if _array_ends(buf):
            return


def _one_event(buf: _Buffer, decode) -> dict:
    """The event at the buffer's position, decoded one value at a time."""
    start = buf.pos
    event = buf.value(decode, "an event")
    if not isinstance(event, dict):
        raise buf.fail("malformed event: events are JSON objects", start)
    return event


def _array_ends(buf: _Buffer) -> bool:
    """After an event: consume the ',' (False) or the closing ']' (True)."""
    c = buf.skip_ws()
    if c == ",":
        buf.pos += 1
        return False
    if c == "]":
        buf.pos += 1
        return True
    raise buf.fail(f"expected ',' or ']' between events, found {_describe(c)}")


# Note [fast event windows]
# Decoding one event at a time costs a Python round trip per event, and a
# dict per event holding every arg. Instead, a window of the text (about a
# chunk) is cut after the last '}' that is followed by ',' or ']' and decoded
# at once as "[" + window + "]" into `Event` records: msgspec skips the
# fields kernelmap does not use without building them. A cut inside a
# string or a nested object cannot decode (JSON is read left to right, so
# the window's text ends inside that string or object); a window that does
# decode therefore ends on an event boundary. A window that ends inside a
# string (a kernel name holding "}, ") is tried again up to the '}' before. Any failure (a bad cut, a
# malformed event, a field of an unexpected type, a value longer than the
# window) sends that window through the one-event-at-a-time path, which
# gives the same errors, byte offsets included, as `read_trace`.

_Id = int | str | None


class Args(msgspec.Struct, gc=False, rename={
    "external_id": "External id", "input_dims": "Input Dims", "input_type": "Input type", "input_strides": "Input Strides",
    "concrete_inputs": "Concrete Inputs", "sequence_number": "Sequence number", "record_function_id": "Record function id",
}):
    """The args kernelmap reads (build._KEPT_ARGS, build._CONV_ARGS, thread names)."""

    correlation: _Id = None
    external_id: _Id = None
    device: _Id = None
    stream: _Id = None
    # Shapes, dtypes, grids and blocks are kept as their JSON text: a trace
    # repeats a few of them a million times, and the builder decodes each
    # distinct one once (build.Pool), ten times cheaper than tuples per event.
    grid: msgspec.Raw = None  # type: ignore[assignment]
    block: msgspec.Raw = None  # type: ignore[assignment]
    input_dims: msgspec.Raw = None  # type: ignore[assignment]
    input_type: msgspec.Raw = None  # type: ignore[assignment]
    input_strides: msgspec.Raw = None  # type: ignore[assignment]
    concrete_inputs: msgspec.Raw = None  # type: ignore[assignment]
    sequence_number: Any = None
    record_function_id: _Id = None  # joins an operator to its execution-trace node (rf_id)
    name: Any = None


ARG_FIELDS = {name: Args.__struct_encode_fields__[i] for i, name in enumerate(Args.__struct_fields__)}  # attribute -> JSON key


class Event(msgspec.Struct, gc=False):
    """One trace event, the fields kernelmap reads, their types checked."""

    ph: str | None = None
    cat: str | None = None
    name: Any = None
    pid: _Id = None
    tid: _Id = None
    ts: float | None = None
    dur: float | None = None
    id: Any = None
    args: Args | None = None


class Loose:
    """An event whose fields did not fit `Event`: its dict, checked by the builder."""

    __slots__ = ("raw",)

    def __init__(self, raw: dict):
        self.raw = raw


class Mixed(list):
    """A window read the slow way: `Loose` records may be among its `Event`s."""


_WINDOW = msgspec.json.Decoder(list[Event])
_MAX_CUTS = 16  # '}' tried per window before it goes the slow way
_RETRIES = 8  # cuts that fall inside a string tried per window before it goes the slow way


def _fast_events(buf: _Buffer, decode) -> Iterator[list[Event | Loose]]:
    """The elements of an array whose '[' has been consumed, through its ']',
    as lists, a window at a time (Note [fast event windows])."""
    if buf.skip_ws() == "]":
        buf.pos += 1
        return
    while True:
        if not buf.eof and len(buf.text) - buf.pos < CHUNK:
            buf._read_more()
        text, pos = buf.text, buf.pos
        cut = _cut(text, pos)
        batch = None
        for _ in range(_RETRIES):  # a cut inside a string ("{lambda(float)#1}, std::array" in a kernel name): the '}' before it
            if cut <= pos:
                break
            try:
                batch = _WINDOW.decode("[" + text[pos : cut + 1] + "]")
                break
            except msgspec.DecodeError as e:
                if "truncated" not in str(e):
                    break  # malformed text: the slow way says where
                cut = _cut(text, pos, cut)
            except (msgspec.ValidationError, RecursionError):
                break
        if batch is not None:
            buf.pos = cut + 1
            yield batch
        else:
            # The slow way, through the end of the window (or one event when none was cut).
            end = buf.dropped + max(cut, pos)
            slow = Mixed()
            while True:
                event = _one_event(buf, decode)
                try:
                    slow.append(msgspec.convert(event, Event))
                except (msgspec.ValidationError, RecursionError):
                    slow.append(Loose(event))
                if buf.dropped + buf.pos >= end or buf.skip_ws() != ",":
                    break
                buf.pos += 1
                buf.skip_ws()
            yield slow
        if _array_ends(buf):
            return


def _cut(text: str, pos: int, before: int | None = None) -> int:
    """The last '}' after `pos` (and before `before`) followed (after blanks) by ',' or ']', or -1."""
    n = len(text)
    j = text.rfind("}", pos) if before is None else text.rfind("}", pos, before)
    for _ in range(_MAX_CUTS):
        if j < 0:
            return -1
        k = j + 1
        while k < n and text[k] in _WS:
            k += 1
        if k < n and text[k] in ",]":
            return j
        j = text.rfind("}", pos, j)
    return -1
