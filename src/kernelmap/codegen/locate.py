"""Find one operator in the generated files: its Python binding, its
`at::_ops` entry points, every wrapper registered for it, the backward node
its autograd wrapper creates and its ufunc kernels; each as an `Excerpt`
with the file and line a build directory would show.

Lookups go through the index (kernelmap.codegen.index); only the lines shown
are read from the files, and a definition's end is found by matching braces.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import re
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from kernelmap.codegen.sites import (
    Binding,
    Excerpt,
    GeneratedCode,
    Layer,
    OpsFunction,
    Registration,
    StructuredClass,
    UfuncKernel,
)
from kernelmap.connections import PerThread
from kernelmap.model import Location, Op, OperatorName, Origin
from kernelmap.errors import KernelmapError
from kernelmap.safefiles import NotRegularFile, connect, open_regular, read_bytes

# The Python name a binding gets from the file its method table is in.
_PYTHON_MODULES = (
    ("python_torch_functions", "torch"),
    ("python_variable_methods", "torch.Tensor"),
    ("python_nn_functions", "torch._C._nn"),
    ("python_fft_functions", "torch._C._fft"),
    ("python_linalg_functions", "torch._C._linalg"),
    ("python_special_functions", "torch._C._special"),
    ("python_sparse_functions", "torch._C._sparse"),
    ("python_nested_functions", "torch._C._nested"),
)
_AUTOGRAD_FILES = ("VariableType_", "TraceType_", "ADInplaceOrViewType_")

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'')
_CALL = re.compile(r"\b(at::[\w:]*\w)\s*(?:<[^<>()]*>)?\s*\(")
_METHOD_CALL = re.compile(r"\bself\.(\w+)\s*\(")
_KEEP_CALL = re.compile(r"^at::(?:(?:native|_ops|redispatch|cpu|cuda|meta|composite\w*|functionalization)::|[a-z_]\w*$)")
_NOT_OPS = frozenset({"at::borrow_from_optional_tensor", "at::maybe_get_output", "at::empty_like", "at::zeros_like"})
_NAMED_KERNEL = re.compile(r"\b(at::native::\w+)")
_GRAD_FN = re.compile(r"(?:std::shared_ptr|c10::intrusive_ptr)<(\w+)> grad_fn;")
_STRUCTURED = re.compile(r"\b(structured_\w+)\b")
_CASE = re.compile(r"^\s*case (\d+): \{")
_SIGNATURE = re.compile(r'^\s*("(?:\\.|[^"\\])*"),\s*$')
_REGISTER_DISPATCH = re.compile(r"^REGISTER_DISPATCH\((\w+), &(\w+)\)", re.M)


def definition_end(lines: list[str], start: int, limit: int = 20000) -> int:
    """The 1-based last line of the definition opening at 1-based line `start`:
    where its braces balance again (string literals and // comments ignored)."""
    depth = 0
    opened = False
    index, stop = start - 1, min(len(lines), start - 1 + limit)
    if index < 0:  # from the last line on, as a list counts from its end
        return _definition_end_from(lines, start, stop)
    while index < stop:
        for line in lines[index : min(stop, index + 256)]:  # a slice at a time: `lines` may split its text lazily
            text = (_STRING.sub('""', line) if '"' in line or "'" in line else line).split("//", 1)[0]
            opens, closes = text.count("{"), text.count("}")
            depth += opens - closes
            opened = opened or opens > 0
            if opened and depth <= 0:
                return index + 1
            index += 1
    return start


def _definition_end_from(lines, start: int, stop: int) -> int:
    depth = 0
    opened = False
    for index in range(start - 1, stop):
        line = lines[index]
        text = (_STRING.sub('""', line) if '"' in line or "'" in line else line).split("//", 1)[0]
        opens, closes = text.count("{"), text.count("}")
        depth += opens - closes
        opened = opened or opens > 0
        if opened and depth <= 0:
            return index + 1
    return start


class _Lines(Sequence):
    r"""The lines of a text as `text.split("\n")` gives them, each split only
    when asked for: a generated file is megabytes, of which a question reads
    a few definitions. Newlines are counted per block once, to find a line."""

    _BLOCK = 1 << 12

    def __init__(self, text: str):
        self._text = text
        before = [0]  # newlines before each block's first character
        for k in range(0, len(text), self._BLOCK):
            before.append(before[-1] + text.count("\n", k, k + self._BLOCK))
        self._before = before
        self._len = before[-1] + 1
        self._newlines: dict[int, list[int]] = {}  # block -> where its newlines are, once a line in it was asked for

    def __len__(self) -> int:
        return self._len

    def _start(self, n: int) -> int:
        """Where 0-based line `n` begins (one past the text's end for n == len)."""
        if n <= 0:
            return 0
        if n >= self._len:
            return len(self._text) + 1
        k = bisect.bisect_left(self._before, n) - 1  # the n-th newline is in block k
        found = self._newlines.get(k)
        if found is None:  # each newline's position: one past the end of each line the block's text splits into
            start = k * self._BLOCK
            parts = self._text[start : (k + 1) * self._BLOCK].split("\n")
            found = self._newlines[k] = list(itertools.accumulate(map((1).__add__, map(len, parts[:-1])), initial=start - 1))[1:]
        return found[n - self._before[k] - 1] + 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            first, stop, step = i.indices(self._len)
            if step != 1:
                return [self[j] for j in range(first, stop, step)]
            if first >= stop:
                return []
            return self._text[self._start(first) : self._start(stop) - 1].split("\n")
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("line index out of range")
        return self._text[self._start(i) : self._start(i + 1) - 1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._text.split("\n"))


# Note [generated files hashed once]
# A generated file read for an answer is hashed against the manifest
# (Note [generated files keyed by content] in codegen/build.py). A CLI run
# reads a few megabytes of them; so a file hashed once is recorded in one
# small file beside the index (`read.verified`) with its size, mtime, inode
# and ctime, and is not hashed again while all four are the same. Any write
# changes the ctime, which no one can set back (an edit that keeps the size
# and restores the mtime included); a check just after a write is not
# recorded (Note [racy checks] in kernelmap.verified).
_CHECKED = "read.verified"


class _Checked:
    """The generated files of one set whose bytes were hashed and found as generated."""

    def __init__(self, path: Path):
        self.path = path
        self._stamps: dict[str, list[int]] | None = None

    @staticmethod
    def _stamp(st: os.stat_result) -> list[int]:
        return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]

    def _read(self) -> dict[str, list[int]]:
        if self._stamps is None:
            try:
                kept = json.loads(read_bytes(self.path, "a check's record"))
                self._stamps = kept if isinstance(kept, dict) else {}
            except (OSError, ValueError, RecursionError, NotRegularFile):
                self._stamps = {}
        return self._stamps

    def is_same(self, path: str, st: os.stat_result) -> bool:
        return self._read().get(path) == self._stamp(st)

    def add(self, path: str, st: os.stat_result) -> None:
        """Record `path` as checked, unless it was written too recently to tell a later write apart."""
        from kernelmap.verified import MARGIN_NS

        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < MARGIN_NS:
            return
        stamps = self._read()
        stamps[path] = self._stamp(st)
        try:  # another process may have recorded others meanwhile: keep theirs too
            kept = json.loads(read_bytes(self.path, "a check's record"))
            if isinstance(kept, dict):
                stamps.update({k: v for k, v in kept.items() if k not in stamps})
        except (OSError, ValueError, RecursionError, NotRegularFile):
            pass
        try:
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(stamps))
            os.replace(tmp, self.path)
        except OSError:  # a cache that cannot be written: hashed on each read
            pass


# Note [generated lines kept]
# A warm process (kernelmap mcp, the web app) answers hundreds of questions
# from the same generated files, through several sets (the wheel's, each
# tree's) and several open copies of one set (a graph context per device
# opens its own). A file read is kept, split into lines as they are asked
# for, in one table for the whole process, keyed by the file's content hash
# from the manifest (what was checked against it once is the same text for
# every copy of the set), up to LINES_KEPT characters: past that, the files
# least recently asked for are forgotten, and read and checked again when
# asked for. A stack reads most of one set (30-35 MB of its 35-45 MB, in
# turn, the largest files many times), so a table smaller than a set would
# read files again on every question: it holds about two sets.
LINES_KEPT = 64 << 20


class _KeptLines:
    """The lines of the generated files read, least recently asked for first."""

    def __init__(self) -> None:
        self._lines: dict[tuple, _Lines] = {}
        self._chars = 0
        self._lock = threading.Lock()  # questions are answered on several threads

    def get(self, key: tuple) -> _Lines | None:
        with self._lock:
            found = self._lines.pop(key, None)
            if found is not None:  # now the most recently asked for: last
                self._lines[key] = found
            return found

    def put(self, key: tuple, lines: _Lines) -> _Lines:
        with self._lock:
            again = self._lines.pop(key, None)  # read by another thread meanwhile
            if again is not None:
                self._chars -= len(again._text)
            self._lines[key] = lines
            self._chars += len(lines._text)
            while self._chars > LINES_KEPT and len(self._lines) > 1:  # forget the least recently asked for
                self._chars -= len(self._lines.pop(next(iter(self._lines)))._text)
        return lines

    @property
    def chars(self) -> int:
        return self._chars


_KEPT = _KeptLines()


class GeneratedFiles:
    """One complete set of generated files in the cache, with its index."""

    def __init__(self, root: Path, manifest: dict, origin: Origin):
        self.root = root
        self.manifest = manifest
        self.origin = origin  # kind GENERATED, root = the cache directory
        self.db = PerThread(connect(root / "index.sqlite", "the generated files' index"))  # read from any thread
        self._unhashed = object()  # keys the lines of files the manifest has no hash of to this open set alone
        self._seen: set[str] = set()  # the files this open set has checked (Note [generated lines kept])
        self._located: dict[tuple, GeneratedCode] = {}  # locate_op's answers: the files never change under an open set
        self._checked = _Checked(root / _CHECKED)
        self._registered: dict[str, tuple[Registration, ...]] = {}  # an operator's registrations, for any set of layers
        self._reading: list[set[str]] = []  # the files each answer being computed reads (Note [located answers kept])
        self._store_key: str | None = None

    def __repr__(self) -> str:
        return f"GeneratedFiles({self.origin.label!r}, {str(self.root)!r})"

    def lines(self, path: str) -> Sequence[str]:
        """The lines of a generated file, by its build path (a sequence that
        splits them as they are asked for; Note [generated lines kept])."""
        expected = (self.manifest.get("sha256") or {}).get(path)
        key = ("sha256", expected) if expected is not None else (self._unhashed, path)
        for reads in self._reading:
            reads.add(path)
        found = _KEPT.get(key)
        if found is None or (path not in self._seen and not self._unchanged(path, expected)):
            found = _KEPT.put(key, self._read(path))
        self._seen.add(path)
        return found

    def _unchanged(self, path: str, expected: str | None) -> bool:
        """Whether this set's `path` is, by its stamp, the file once hashed as `expected`
        (another open copy of the set read it): each open set checks each of its files."""
        try:
            st = os.stat(self.root / path, follow_symlinks=False)
        except OSError:
            return False
        return expected is not None and stat.S_ISREG(st.st_mode) and self._checked.is_same(path, st)

    def _read(self, path: str) -> _Lines:
        with open_regular(self.root / path, "rb", "a generated file") as f:
            st = os.fstat(f.fileno())
            data = f.read()
        # Note [generated files keyed by content] in codegen/build.py: what is read is what was generated
        expected = (self.manifest.get("sha256") or {}).get(path)
        if expected is not None and not self._checked.is_same(path, st):
            if hashlib.sha256(data).hexdigest() != expected:
                from kernelmap.codegen.build import CacheDamaged

                raise CacheDamaged(f"{self.root}/{path} is not the file that was generated (edited since)")
            self._checked.add(path, st)
        return _Lines(data.decode("utf-8", errors="replace"))

    def excerpt(self, path: str, line: int, end_line: int | None = None) -> Excerpt:
        lines = self.lines(path)
        end = end_line if end_line is not None else line
        return Excerpt(Location(path, line, end, self.origin), "\n".join(lines[line - 1 : end]))

    def definition(self, path: str, line: int) -> Excerpt:
        """The function or struct whose first line is `path:line`."""
        return self.excerpt(path, line, definition_end(self.lines(path), line))

    def paths(self) -> list[str]:
        return [p for (p,) in self.db.execute("SELECT path FROM files ORDER BY path")]

    def has_file(self, path: str) -> bool:
        return self.db.execute("SELECT 1 FROM files WHERE path = ?", (path,)).fetchone() is not None

    def registrations_at(self, path: str, block_line: int) -> list[tuple[str, str, str]]:
        """(namespace, key, op) of every m.impl in the TORCH_LIBRARY_IMPL block at `path:block_line`."""
        return self.db.execute(
            "SELECT i.namespace, i.key, i.op FROM impls i JOIN files f ON f.id = i.file "
            "WHERE f.path = ? AND i.block_line = ?",
            (path, block_line),
        ).fetchall()

    def schema_blocks(self, op: str) -> list[tuple[str, int]]:
        """(path, block_line) of the TORCH_LIBRARY blocks that m.def `op`."""
        return self.db.execute(
            "SELECT f.path, s.block_line FROM schemas s JOIN files f ON f.id = s.file WHERE s.op = ?", (op,)
        ).fetchall()

    def defs(self, name: str, path: str | None = None) -> list[tuple[str, int, str, str | None]]:
        """(path, line, kind, base) of the definitions called `name`."""
        sql = "SELECT f.path, d.line, d.kind, d.base FROM defs d JOIN files f ON f.id = d.file WHERE d.name = ?"
        args: tuple = (name,)
        if path is not None:
            sql += " AND f.path = ?"
            args += (path,)
        return self.db.execute(sql + " ORDER BY f.path, d.line", args).fetchall()


# ---------------------------------------------------------------------------
# One operator
# ---------------------------------------------------------------------------


def locate_op(files: GeneratedFiles, op: Op, layers: Iterable[Layer] = tuple(Layer), ufunc_op: Op | None = None) -> GeneratedCode:
    """The generated code of `op` in `files`, for the given layers.

    `ufunc_op` is the operator whose `ufunc_inner_loop` generated the ufunc
    files (`op` itself, or its structured delegate: add.Tensor -> add.out).
    Kept per set of files by what the answer reads of `op`: a question asks
    for an operator's code from several layers, and a warm process from many
    questions."""
    layers = frozenset(layers)
    source = ufunc_op if ufunc_op is not None else (op if op.ufunc_inner_loop else None)
    key = (op.name, op.manual_cpp_binding, source.name.name if source is not None else None, layers)
    found = files._located.get(key)
    if found is None:
        found = _kept_answer(files, key)
        if found is None:
            reads: set[str] = set()
            files._reading.append(reads)
            try:
                found = _locate_op(files, op, layers, ufunc_op)
            finally:
                files._reading.remove(reads)
            _keep_answer(files, key, found, reads)
        files._located[key] = found
        _forget_oldest(files._located)
    return found


# Note [located answers kept]
# A cold CLI question locates tens of operators in the generated files, each
# a few index queries and a brace match over megabytes of text. The answer is
# a function of the files, the index built from them and this module's code;
# so each is written, as its gen document, in `located/` beside the index,
# under a hash of the operator's key, the manifest and the code. It is
# answered from there only when it names the same key, manifest and code and
# every generated file it read has the stamp recorded when that file was last
# hashed against the manifest (`read.verified`): an edited file is read, and
# refused, as without the record. A record that cannot be read or does not
# parse is computed again and rewritten (temp file, then rename).
_LOCATED = "located"
_STORE_VERSION = 1


def _store_key(files: GeneratedFiles) -> str:
    if files._store_key is None:
        code = hashlib.sha256()
        here = Path(__file__).resolve().parent
        for name in ("locate.py", "sites.py", "index.py"):
            try:
                code.update(read_bytes(here / name))
            except (OSError, NotRegularFile):
                code.update(os.urandom(16))  # unknown code: never match a record
        manifest = json.dumps(files.manifest, sort_keys=True, default=str).encode()
        files._store_key = f"{_STORE_VERSION}:{code.hexdigest()}:{hashlib.sha256(manifest).hexdigest()}"
    return files._store_key


def _answer_path(files: GeneratedFiles, key: tuple) -> tuple[Path, str]:
    name = repr((key[0].unqualified if isinstance(key[0], OperatorName) else str(key[0]), *key[1:3], sorted(layer.value for layer in key[3])))
    digest = hashlib.sha256(f"{_store_key(files)}\n{name}".encode()).hexdigest()[:40]
    return files.root / _LOCATED / f"{digest}.json", name


def _kept_answer(files: GeneratedFiles, key: tuple) -> GeneratedCode | None:
    path, name = _answer_path(files, key)
    try:
        kept = json.loads(read_bytes(path, "a located answer"))
        if not (isinstance(kept, dict) and kept.get("key") == name and kept.get("store") == _store_key(files)):
            return None
        hashes = files.manifest.get("sha256") or {}
        read = kept["files"]
        if not all(hashes.get(p) == sha and files._unchanged(p, sha) for p, sha in read.items()):
            return None
        found = GeneratedCode.from_json(kept["answer"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError, AssertionError, RecursionError, NotRegularFile, KernelmapError):
        return None
    if found.origin != files.origin or found.op != key[0]:
        return None
    files._seen.update(read)
    return found


def _keep_answer(files: GeneratedFiles, key: tuple, found: GeneratedCode, reads: set[str]) -> None:
    hashes = files.manifest.get("sha256") or {}
    if any(hashes.get(p) is None for p in reads):
        return  # a file the manifest has no hash of: nothing to check a record against
    path, name = _answer_path(files, key)
    record = {"store": _store_key(files), "key": name, "files": {p: hashes[p] for p in sorted(reads)}, "answer": found.to_json()}
    try:
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError:  # a read-only cache: located on each run
        return
    _bound_answers(path.parent)


# The answers kept on disk per set of files: an answer is one file, and those
# of an older kernelmap (another `_store_key`) are never read again, so the
# folder is looked over at a process's first answer written and every
# _PRUNE_EVERY after: past _LOCATED_FILES files, the oldest written are
# removed, down to three quarters of it (a removed answer is located again).
_LOCATED_FILES = 8192
_PRUNE_EVERY = 1024
_WRITTEN: dict[Path, int] = {}  # per folder, the answers this process wrote there


def _bound_answers(folder: Path) -> None:
    written = _WRITTEN[folder] = _WRITTEN.get(folder, 0) + 1
    if (written - 1) % _PRUNE_EVERY:
        return
    limit = _LOCATED_FILES
    try:
        with os.scandir(folder) as entries:
            found = [(e.stat(follow_symlinks=False).st_mtime_ns, e.path) for e in entries if e.name.endswith(".json")]
    except OSError:
        return
    if len(found) <= limit:
        return
    found.sort()
    for _, path in found[: len(found) - limit * 3 // 4]:
        try:
            os.unlink(path)
        except OSError:
            pass


KEPT = 8192  # operators' answers kept per set of files (about 2,500 operators ask for two or three sets of layers each)


def _forget_oldest(table: dict) -> None:
    while len(table) > KEPT:
        del table[next(iter(table))]


def _registrations_of(files: GeneratedFiles, unqualified: str) -> tuple[Registration, ...]:
    """Every registration of an operator, read once whichever layers are asked for (a graph
    asks top-down for some, bottom-up for others)."""
    found = files._registered.get(unqualified)
    if found is None:
        found = files._registered[unqualified] = tuple(_registrations(files, unqualified))
        _forget_oldest(files._registered)
    return found


def _locate_op(files: GeneratedFiles, op: Op, layers: frozenset[Layer], ufunc_op: Op | None) -> GeneratedCode:
    name = op.name
    unqualified = name.unqualified
    notes: list[str] = []

    schema = None
    rows = files.db.execute(
        "SELECT f.path, s.line, s.end_line FROM schemas s JOIN files f ON f.id = s.file WHERE s.op = ?", (unqualified,)
    ).fetchall()
    if rows:
        schema = files.excerpt(*rows[0])

    bindings: tuple[Binding, ...] = ()
    if Layer.BINDING in layers:
        bindings = tuple(_bindings(files, unqualified))
        if not bindings:
            why = "it is bound by hand (manual_cpp_binding)" if op.manual_cpp_binding else "torchgen generates no binding for it (an internal operator, or one only C++ calls)"
            notes.append(f"{name} has no generated Python binding: {why}")

    ops: tuple[OpsFunction, ...] = ()
    if Layer.OPS in layers:
        ops = tuple(_ops_functions(files, name))
        if not ops:
            notes.append(f"{name} has no at::_ops entry in Operators_*.cpp")

    registrations: list[Registration] = []
    backward = None
    if layers & {Layer.AUTOGRAD, Layer.REGISTER}:
        for reg in _registrations_of(files, unqualified):
            if reg.layer in layers:
                registrations.append(reg)
        if Layer.AUTOGRAD in layers:
            node = next((r.backward_node for r in registrations if r.backward_node), None)
            if node:
                found = files.defs(f"{node}::apply")
                if found:
                    backward = files.definition(found[0][0], found[0][1])
        if Layer.REGISTER in layers and not any(r.layer is Layer.REGISTER for r in registrations):
            notes.append(f"{name} has no generated Register<Key> wrapper: its kernels are registered by hand in C++, or it has none")
        if Layer.AUTOGRAD in layers and not any(r.layer is Layer.AUTOGRAD for r in registrations):
            notes.append(f"{name} has no generated autograd, tracing or ADInplaceOrView wrapper: its kernels for those keys are "
                         "written by hand (tools/autograd's MANUAL_* lists), or it is composite implicit, or not differentiable")
        elif Layer.AUTOGRAD in layers and not any(r.key.startswith("Autograd") for r in registrations):
            notes.append(f"{name} has no generated autograd kernel (VariableType): composite implicit, or not differentiable")

    ufunc: tuple[UfuncKernel, ...] = ()
    if Layer.UFUNC in layers:
        source = ufunc_op if ufunc_op is not None else (op if op.ufunc_inner_loop else None)
        if source is not None:
            ufunc = tuple(_ufunc_kernels(files, source.name.name))
        if not ufunc:
            notes.append(f"{name} has no ufunc kernels (only structured operators with ufunc_inner_loop get them)")

    return GeneratedCode(
        op=name,
        origin=files.origin,
        schema=schema,
        bindings=bindings,
        ops=ops,
        registrations=tuple(registrations),
        backward=backward,
        ufunc=ufunc,
        notes=tuple(notes),
        layers=tuple(layer for layer in Layer if layer in layers),  # the enum's order: a set's differs from run to run
    )


def _bindings(files: GeneratedFiles, unqualified: str) -> Iterable[Binding]:
    rows = files.db.execute(
        "SELECT f.path, p.line, f.id FROM pycalls p JOIN files f ON f.id = p.file WHERE p.op = ? ORDER BY f.path, p.line",
        (unqualified,),
    ).fetchall()
    seen: set[tuple[str, int]] = set()
    for path, line, file_id in rows:
        found = files.db.execute(
            "SELECT name, line FROM defs WHERE file = ? AND line < ? AND kind = 'function' AND name LIKE 'THPVariable%' "
            "ORDER BY line DESC LIMIT 1",
            (file_id, line),
        ).fetchone()
        if found is None or (path, found[1]) in seen:
            continue
        seen.add((path, found[1]))
        function, start = found
        definition = files.definition(path, start)
        lines = files.lines(path)
        signatures, case_index = [], None
        for text in lines[start - 1 : line]:
            sig = _SIGNATURE.match(text)
            if sig:
                signatures.append(_unquote(sig.group(1)))
            case = _CASE.match(text)
            if case:
                case_index = int(case.group(1))
        signature = None
        if signatures:
            signature = signatures[case_index] if case_index is not None and case_index < len(signatures) else signatures[0]
        # the whole signature list, also those after this operator's case
        if definition.location.end_line:
            signatures = [
                _unquote(m.group(1))
                for text in lines[start - 1 : definition.location.end_line]
                if (m := _SIGNATURE.match(text))
            ]
        case = files.excerpt(path, line, _case_end(lines, line))
        calls = _calls(case.text, methods=True)
        module = next((m for prefix, m in _PYTHON_MODULES if Path(path).name.startswith(prefix)), None)
        methods = files.db.execute("SELECT pyname, line FROM methods WHERE file = ? AND function = ? ORDER BY line", (file_id, function)).fetchall()
        python_names = tuple(dict.fromkeys(f"{module}.{py}" for py, _ in methods)) if module else ()
        yield Binding(
            function=function,
            python_names=python_names,
            signatures=tuple(signatures),
            signature=signature,
            definition=definition,
            case=case,
            calls=calls,
            method_defs=tuple(files.excerpt(path, ml) for _, ml in methods),
        )


def _unquote(literal: str) -> str:
    return literal[1:-1].replace('\\"', '"').replace("\\\\", "\\")


def _case_end(lines: list[str], comment_line: int) -> int:
    """The last line of a binding's dispatch case: the statement that calls the lambda."""
    lambda_closed = False
    for index in range(comment_line, min(len(lines), comment_line + 200)):
        text = lines[index].strip()
        if text == "};":
            lambda_closed = True
        elif lambda_closed and (text.startswith("return") or text.startswith("Py_RETURN_NONE")):
            return index + 1
    return comment_line


def _calls(text: str, methods: bool = False) -> tuple[str, ...]:
    """The operator-level calls in a piece of generated code, in order; with
    `methods`, also `self.add(...)` as at::Tensor::add (a binding's calls)."""
    found: list[tuple[int, str]] = []
    for m in _CALL.finditer(text):
        name = m.group(1)
        if _KEEP_CALL.match(name) and name not in _NOT_OPS:
            found.append((m.start(), name))
    if methods:
        for m in _METHOD_CALL.finditer(text):
            found.append((m.start(), f"at::Tensor::{m.group(1)}"))
    return tuple(dict.fromkeys(name for _, name in sorted(found)))


def _ops_functions(files: GeneratedFiles, name: OperatorName) -> Iterable[OpsFunction]:
    unambiguous = f"{name.name}_{name.overload}" if name.overload else name.name
    for what in ("call", "redispatch"):
        for path, line, _, _ in files.defs(f"{unambiguous}::{what}"):
            if Path(path).name.startswith("Operators_"):
                yield OpsFunction(f"at::_ops::{unambiguous}::{what}", files.definition(path, line))


def _registrations(files: GeneratedFiles, unqualified: str) -> Iterable[Registration]:
    rows = files.db.execute(
        "SELECT i.key, f.path, i.block_line, i.line, i.end_line, i.symbol FROM impls i JOIN files f ON f.id = i.file "
        "WHERE i.op = ? AND i.namespace = 'aten' ORDER BY f.path, i.line",
        (unqualified,),
    ).fetchall()
    for key, path, block_line, line, end_line, symbol in rows:
        layer = Layer.AUTOGRAD if Path(path).name.startswith(_AUTOGRAD_FILES) else Layer.REGISTER
        definition = None
        calls: tuple[str, ...] = ()
        node = None
        structured: list[StructuredClass] = []
        if symbol != "fallthrough":
            found = files.defs(symbol, path) or files.defs(symbol.rsplit("::", 1)[-1], path)
            if found:
                definition = files.definition(path, found[0][1])
                calls = _calls(definition.text)
                grad_fn = _GRAD_FN.search(definition.text)
                node = grad_fn.group(1) if grad_fn else None
                for class_name in dict.fromkeys(_STRUCTURED.findall(definition.text)):
                    for struct_path, struct_line, kind, base in files.defs(class_name, path):
                        if kind == "struct":
                            structured.append(StructuredClass(class_name, base, files.definition(struct_path, struct_line)))
        impl = files.excerpt(path, line, end_line)
        if definition is None:  # a kernel named in the m.impl itself: static_cast<...>(at::native::_unpack_dual)
            calls = tuple(dict.fromkeys(_NAMED_KERNEL.findall(impl.text)))
        yield Registration(
            key=key,
            layer=layer,
            symbol=symbol,
            block=Location(path, block_line, origin=files.origin),
            impl=impl,
            definition=definition,
            calls=calls,
            backward_node=node,
            structured=tuple(structured),
        )


def _ufunc_kernels(files: GeneratedFiles, base: str) -> Iterable[UfuncKernel]:
    for key, path in (
        ("CPU", f"build/aten/src/ATen/UfuncCPU_{base}.cpp"),
        ("CPU", f"build/aten/src/ATen/UfuncCPUKernel_{base}.cpp"),
        ("CUDA", f"build/aten/src/ATen/UfuncCUDA_{base}.cu"),
    ):
        if not files.has_file(path):
            continue
        rows = files.db.execute(
            "SELECT d.name, d.line, d.kind FROM defs d JOIN files f ON f.id = d.file WHERE f.path = ? ORDER BY d.line",
            (path,),
        ).fetchall()
        found = [(line, name, files.definition(path, line)) for name, line, kind in rows if not name.startswith("structured_") or "::" in name]
        text = "\n".join(files.lines(path))
        for m in _REGISTER_DISPATCH.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append((line, f"REGISTER_DISPATCH({m.group(1)}, &{m.group(2)})", files.excerpt(path, line)))
        for _, name, excerpt in sorted(found, key=lambda item: item[0]):
            yield UfuncKernel(key, name, excerpt)
