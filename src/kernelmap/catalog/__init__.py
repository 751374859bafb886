"""The operator catalog: every operator of native_functions.yaml as an `Op`,
with its kernels per dispatch key, its autograd entry and its Python names.

    cat = load_catalog()                 # the installed torch's packaged yaml
    cat = load_catalog(tree=Path(...))   # a source tree, read by its own torchgen
    cat.get("aten::add.Tensor")          # one operator, or UnknownName
    cat.resolve("F.relu")                # every operator a name can reach

Note [operator kinds]
An operator's kind says how it gets its kernels, taken in this order:
`structured_delegate` -> structured (its kernels are the delegate's);
`structured: True` with `ufunc_inner_loop` -> ufunc (CPU/CUDA kernels are
generated from the inner loops); `structured: True` -> structured out;
a CompositeImplicitAutograd kernel (named, or the default for an entry with
no `dispatch:`) -> composite implicit; a backend key (CPU, CUDA, ...) ->
dispatch; then composite explicit non-functional, composite explicit, and
no kernel. Views, in-place and out= are flags beside the kind.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from kernelmap import env
from kernelmap.catalog.store import FUNCTIONAL, CatalogFiles, CatalogWarning, open_catalog_db
from kernelmap.connections import PerThread
from kernelmap.errors import BadInput, SourceError, UnknownName
from kernelmap.model import (
    Autograd,
    DerivativeFormula,
    Kernel,
    Location,
    Op,
    OperatorName,
    OpKind,
    Origin,
)

__all__ = ["Catalog", "CatalogWarning", "load_catalog", "expand_python_name", "tree_origin", "NATIVE_YAML", "DERIVATIVES_YAML"]

NATIVE_YAML = "aten/src/ATen/native/native_functions.yaml"
TAGS_YAML = "aten/src/ATen/native/tags.yaml"
DERIVATIVES_YAML = "tools/autograd/derivatives.yaml"

_ALIAS_KEYS = frozenset(
    {
        "CompositeImplicitAutograd",
        "CompositeImplicitAutogradNestedTensor",
        "CompositeExplicitAutograd",
        "CompositeExplicitAutogradNonFunctional",
    }
)

# Accepted spellings: dotted Python names and [ns::]name[.overload].
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:(?:\.|::)[A-Za-z_][A-Za-z0-9_]*)*")

_PREFIXES = (("F.", f"{FUNCTIONAL}."), ("nn.functional.", f"{FUNCTIONAL}."), ("nn.", "torch.nn."), ("Tensor.", "torch.Tensor."))


def expand_python_name(text: str) -> str:
    """`F.relu` -> `torch.nn.functional.relu`, `nn.Conv2d` -> `torch.nn.Conv2d`,
    `Tensor.add_` -> `torch.Tensor.add_`; anything else unchanged."""
    for short, full in _PREFIXES:
        if text.startswith(short):
            return full + text[len(short) :]
    return text


def _kind(r: dict) -> OpKind:
    if r["structured_delegate"]:
        return OpKind.STRUCTURED
    if r["structured"]:
        return OpKind.UFUNC if r["ufunc_inner_loop"] else OpKind.STRUCTURED_OUT
    if r["composite_implicit"]:
        return OpKind.COMPOSITE_IMPLICIT
    if any(entry[0] not in _ALIAS_KEYS for entry in r["dispatch"]):
        return OpKind.DISPATCH
    if r["composite_explicit_non_functional"]:
        return OpKind.COMPOSITE_EXPLICIT_NON_FUNCTIONAL
    if r["composite_explicit"]:
        return OpKind.COMPOSITE_EXPLICIT
    return OpKind.NONE


class Catalog:
    """Operators of one set of yaml files (the installed wheel's, or a tree's)."""

    def __init__(self, db: sqlite3.Connection, origin: Origin, stamp: tuple = ()):
        self._db = PerThread(db)  # read from any thread (a graph context is kept and shared)
        self.origin = origin
        self.stamp = stamp  # what tells its yaml files and database apart from edited ones (results kept on disk name it)
        self._names: list[str] | None = None
        self._ops: dict[int, Op] = {}  # by id, as read: a graph reads the same operators many times

    # -- lookups ---------------------------------------------------------

    def get(self, name: str) -> Op:
        """The operator `[aten::]name[.overload]`; the default overload when none is given."""
        opname = _parse_op_name(name)
        row = self._db.execute("SELECT id, record FROM ops WHERE qualified = ?", (opname.unqualified,)).fetchone()
        if row is None or opname.namespace != "aten":
            raise UnknownName(name, self.suggest(name))
        return self._op(*row)

    def overloads(self, base: str) -> tuple[Op, ...]:
        rows = self._db.execute("SELECT id, record FROM ops WHERE base = ? ORDER BY id", (base,)).fetchall()
        return tuple(self._op(*row) for row in rows)

    def resolve(self, name: str) -> tuple[Op, ...]:
        """Every operator `name` can reach, most likely first.

        `name` is an operator (`aten::add.Tensor`, `add.Tensor`, `conv2d`) or a
        Python name (`torch.add`, `torch.Tensor.add_`, `torch.nn.functional.conv2d`,
        `F.relu`, `torch._C._nn.gelu`, `torch.linalg.norm`).
        """
        text = expand_python_name(_validate(name))
        if "::" in text:
            opname = _parse_op_name(text)
            if opname.namespace == "aten":
                if opname.overload:
                    ops = self._by_qualified(opname.unqualified)
                else:
                    ops = self._by_qualified(opname.name) or self.overloads(opname.name)
                if ops:
                    return _ranked(ops)
        elif text.startswith("torch."):
            rows = self._db.execute(
                "SELECT ops.id, ops.record FROM entries JOIN ops ON ops.id = entries.op_id WHERE entries.name = ?",
                (text,),
            ).fetchall()
            if rows:
                return _ranked(self._op(*row) for row in dict(rows).items())
        else:
            ops = self._by_qualified(text) or (self.overloads(text) if "." not in text else ())
            if ops:
                return _ranked(ops)
        raise UnknownName(name, self.suggest(text))

    def delegate(self, op: Op) -> Op | None:
        """The out= operator whose structured kernel a structured operator runs."""
        return self.get(op.structured_delegate) if op.structured_delegate else None

    def effective_kernel(self, op: Op, key: str) -> Kernel | None:
        """The yaml kernel that backend `key` runs for `op`: its own entry, its
        structured delegate's (add.Tensor runs add.out's CPU kernel), or a
        composite alias key's, which covers every backend."""
        own = op.kernel_for(key)
        if own is not None:
            return own
        delegate = self.delegate(op)
        if delegate is not None and delegate.kernel_for(key) is not None:
            return delegate.kernel_for(key)
        for alias in ("CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd", "CompositeImplicitAutograd"):
            kernel = op.kernel_for(alias)
            if kernel is not None:
                return kernel
        return None

    def ops_with_kernel(self, symbol: str, named: bool = False) -> tuple[Op, ...]:
        """Operators whose yaml names `symbol` (`at::native::cudnn_convolution`)
        as a kernel, in yaml order. `named`: none unless the symbol's last part
        is a word of native_functions.yaml (not a kernel torchgen makes up)."""
        sql = "SELECT ops.id, ops.record FROM kernels JOIN ops ON ops.id = kernels.op_id WHERE kernels.symbol = ?"
        rows = self._db.execute(sql + (" AND kernels.named" if named else "") + " ORDER BY ops.id", (symbol,)).fetchall()
        return tuple(self._op(*row) for row in rows)

    def entry_points(self) -> set[str]:
        """Every Python name that reaches an operator."""
        return {name for (name,) in self._db.execute("SELECT DISTINCT name FROM entries")}

    def __iter__(self) -> Iterator[Op]:
        for row in self._db.execute("SELECT id, record FROM ops ORDER BY id"):
            yield self._op(*row)

    def __len__(self) -> int:
        return self._db.execute("SELECT count(*) FROM ops").fetchone()[0]

    def qualified_names(self) -> set[str]:
        """`add.Tensor`, `conv2d`, ... for every operator."""
        return {q for (q,) in self._db.execute("SELECT qualified FROM ops")}

    def suggest(self, name: str, n: int = 5) -> tuple[str, ...]:
        """The known names closest to `name`."""
        if self._names is None:
            names = {q for (q,) in self._db.execute("SELECT qualified FROM ops")}
            names |= {e for (e,) in self._db.execute("SELECT DISTINCT name FROM entries")}
            self._names = sorted(names)
        text = expand_python_name(name.strip()).removeprefix("aten::")
        pool = self._names
        import difflib  # only for a name that is not found: a question that is answered never imports it

        if text.startswith("torch."):
            matches = difflib.get_close_matches(text, [p for p in pool if p.startswith("torch.")], n, 0.75)
        else:
            matches = difflib.get_close_matches(text, [p for p in pool if not p.startswith("torch.")], n, 0.6)
        return tuple(matches)

    # -- records -> model ------------------------------------------------

    def _by_qualified(self, qualified: str) -> tuple[Op, ...]:
        row = self._db.execute("SELECT id, record FROM ops WHERE qualified = ?", (qualified,)).fetchone()
        return (self._op(*row),) if row else ()

    def _op(self, op_id: int, record: str) -> Op:
        found = self._ops.get(op_id)
        if found is None:
            found = self._ops[op_id] = self._read_op(op_id, record)
        return found

    def _read_op(self, op_id: int, record: str) -> Op:
        r = json.loads(record)
        entries = [name for (name,) in self._db.execute("SELECT name FROM entries WHERE op_id = ? ORDER BY rowid", (op_id,))]
        yaml_loc = Location(NATIVE_YAML, r["line"], origin=self.origin)
        autograd = None
        a = r["autograd"]
        if a is not None:
            autograd = Autograd(
                backward_node=a["node"],
                location=Location(DERIVATIVES_YAML, a["line"], origin=self.origin) if a["line"] else None,
                formulas=tuple(DerivativeFormula(tuple(inputs), formula) for inputs, formula in a["formulas"]),
                signature=a["name"],
            )
        return Op(
            name=OperatorName(r["name"], r["overload"]),
            schema=r["schema"],
            location=yaml_loc,
            kind=_kind(r),
            variants=tuple(r["variants"]),
            python_module=r["python_module"],
            tags=tuple(r["tags"]),
            dispatch=tuple(
                Kernel(key, symbol, location=self._kernel_location(r, key, yaml_loc, line), kind="native", structured=structured)
                for key, symbol, structured, line in r["dispatch"]
            ),
            structured_delegate=r["structured_delegate"],
            ufunc_inner_loop=tuple((k, v) for k, v in r["ufunc_inner_loop"]),
            autograd=autograd,
            python_entry_points=tuple(dict.fromkeys(entries)),
            is_view=r["is_view"],
            is_inplace=r["is_inplace"],
            is_out=r["is_out"],
            manual_cpp_binding=r["manual_cpp_binding"],
        )

    def _kernel_location(self, r: dict, key: str, yaml_loc: Location, line: int | None) -> Location | None:
        """Where the yaml names a kernel: its `dispatch:` entry's line; for a
        default composite kernel it names none, the `- func:` line that
        declares it; a ufunc's CPU and CUDA kernels (`ufunc_add_CPU`), the
        `ufunc_inner_loop:` line naming the loop they run (`Generic: add (...)`).
        A kernel torchgen writes for an operator it generates (`_conj_copy_out`
        of `_conj_copy.out`) is named nowhere in the yaml, and the `- func:`
        line is another operator's: it has no location."""
        if line is not None:
            return Location(NATIVE_YAML, line, origin=self.origin)
        if "generated" in r["tags"] or (r["ufunc_inner_loop"] and key in ("CPU", "CUDA")):
            return None
        return yaml_loc


def _validate(name: str) -> str:
    text = name.strip() if isinstance(name, str) else ""
    if not text:
        raise BadInput("empty name: give an operator (aten::conv2d) or a Python name (torch.nn.functional.conv2d)")
    if not _NAME.fullmatch(text):
        raise BadInput(f"not a name: {name!r} (letters, digits, '_', '.' and '::' only)")
    return text


def _parse_op_name(name: str) -> OperatorName:
    try:
        return OperatorName.parse(_validate(name))
    except ValueError as e:
        raise BadInput(str(e)) from None


def _ranked(ops) -> tuple[Op, ...]:
    """Default overload first, then functional before in-place before out=, then yaml order."""
    unique = {str(op.name): op for op in ops}.values()
    return tuple(sorted(unique, key=lambda op: (op.name.overload != "", op.is_out, op.is_inplace, op.location.line)))


def tree_origin(root: Path) -> Origin:
    """The origin of a source tree: the registered tree at `root` (labelled
    with its registered name), else its version.txt and, with a .git, its HEAD
    (read as the source registry reads them; imported late, it is heavy)."""
    from kernelmap.source.trees import inspect_tree, list_trees

    resolved = Path(root).resolve()
    registered = next((t for t in list_trees() if t.root == resolved), None)
    return (registered or inspect_tree(root)).origin


def load_catalog(tree: Path | None = None, origin: Origin | None = None) -> Catalog:
    """The catalog of the installed torch, or of the source tree at `tree`.

    Built on first use (a few seconds: torchgen parses the yaml in a
    subprocess), then read from the cache.
    """
    if tree is None:
        install = env.torch_install()
        files = CatalogFiles(
            install.native_yaml,
            install.tags_yaml,
            install.derivatives_yaml,
            install.torch_dir / "nn/functional.py",
            torchgen_root=None,
        )
        origin = origin or install.origin
    else:
        tree = Path(tree).resolve()
        files = CatalogFiles(
            tree / NATIVE_YAML,
            tree / TAGS_YAML,
            tree / DERIVATIVES_YAML,
            tree / "torch/nn/functional.py",
            torchgen_root=tree,
        )
        missing = [p.name for p in (files.native_yaml, files.tags_yaml, files.derivatives_yaml) if not p.exists()]
        if missing or not (tree / "torchgen").is_dir():
            raise SourceError(f"{tree} is not a PyTorch source tree (missing {', '.join(missing) or 'torchgen/'})")
        origin = origin or tree_origin(tree)
    # one process asks for the same catalog many times (a call graph locates every
    # operator's generated code): reuse the open one while its inputs and the
    # cached databases are unchanged, per thread (a connection stays in its thread)
    cache = env.cache_dir()
    key = (_stamp(files.native_yaml, files.tags_yaml, files.derivatives_yaml, files.functional_py), str(files.torchgen_root), origin,
           str(cache), _stamp(*sorted((cache / "catalog").glob("*.sqlite"))), threading.get_ident())
    found = _OPENED.get(key)
    if found is None:
        found = _OPENED[key] = Catalog(open_catalog_db(files, cache), origin, key[0] + key[4])
    return found


_OPENED: dict[tuple, Catalog] = {}


def _stamp(*paths: Path | None) -> tuple:
    """What tells a file apart from an edited one, cheaply: path, size, mtime."""
    out = []
    for p in paths:
        if p is None:
            continue
        try:
            st = p.stat()
            out.append((str(p), st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((str(p), None, None))
    return tuple(out)
