"""`torch._native` overrides -> `NativeOverride`s: DSL kernels (Triton,
CuTe-DSL, nvMath) that torch registers in front of ATen's kernel for an
operator, each guarded by a condition function decided per call.

Read two ways. Statically, the `register_op_override(...)` calls under
`torch/_native/ops/` of the installed wheel (or of a tree) are read with `ast`,
without importing torch: arguments that are loop variables or parameters are
followed to the literal tuples and call sites that bind them. Live, the
registry of the running torch (`torch._native.registry._graphs`) is read and
each function located with `inspect`; an override the static reading finds but
the registry lacks was not registered in this process (its DSL runtime, or a
GPU, is missing), so ATen's kernel always runs here.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kernelmap.model import CallNode, EdgeKind, FunctionRef, Location, NativeOverride, Origin

# the module each DSL's `register_op_override` wrapper lives in -> the DSL name
# the registry records (registry.py's own function takes the name first).
_DSL_OF_MODULE = {"triton_utils": "triton", "cutedsl_utils": "cutedsl"}
# positions of (op, dispatch key, cond, impl) after the DSL and library names
_ARGS = ("lib_symbol", "op_symbol", "dispatch_key", "cond", "impl")
_KERNEL_DECORATORS = ("triton.jit", "triton.autotune", "cute.kernel", "cute.jit")
_MAX_CALLER_DEPTH = 4  # parameter binding followed through at most this many call sites


def _qualified(op_symbol: str) -> str:
    return op_symbol if "::" in op_symbol else f"aten::{op_symbol}"


def _same_op(a: str, b: str) -> bool:
    """aten::bmm and aten::bmm.default are one operator."""
    norm = lambda s: _qualified(s).removesuffix(".default")  # noqa: E731
    return norm(a) == norm(b)


# ---------------------------------------------------------------------------
# static reading


@dataclass
class _Module:
    path: Path
    rel: str  # "torch/_native/ops/bmm_outer_product/triton_impl.py"
    tree: ast.Module
    parents: dict[ast.AST, ast.AST]
    defs: dict[str, ast.FunctionDef]
    assigns: dict[str, ast.stmt]
    imports: dict[str, tuple[str, str | None]]  # local name -> (module, attribute or None)


def _read_module(path: Path, rel: str) -> _Module:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    defs: dict[str, ast.FunctionDef] = {}
    assigns: dict[str, ast.stmt] = {}
    imports: dict[str, tuple[str, str | None]] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs[stmt.name] = stmt  # type: ignore[assignment]
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        assigns[n.id] = stmt
        elif isinstance(stmt, ast.ImportFrom):
            for a in stmt.names:
                imports[a.asname or a.name] = ("." * stmt.level + (stmt.module or ""), a.name)
        elif isinstance(stmt, ast.Import):
            for a in stmt.names:
                imports[a.asname or a.name] = (a.name, None)
    return _Module(path, rel, tree, parents, defs, assigns, imports)


@dataclass(frozen=True)
class _Ref:
    """A module-level name in a module (a function, or a name bound to one)."""

    name: str


def _eval(node: ast.AST | None, env: dict[str, Any], mod: _Module) -> Any:
    """A literal's value: str, _Ref for a module-level name, tuple; None if unknown."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        stmt = mod.assigns.get(node.id)
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.Tuple, ast.List)) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            return _eval(stmt.value, {}, mod)
        return _Ref(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, env, mod) for e in node.elts)
    return None


def _bind(target: ast.AST, value: Any, env: dict[str, Any]) -> dict[str, Any]:
    env = dict(env)
    if isinstance(target, ast.Name):
        env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, tuple) and len(value) == len(target.elts):
        for t, v in zip(target.elts, value):
            env = _bind(t, v, env)
    return env


def _enclosing(node: ast.AST, mod: _Module) -> tuple[ast.FunctionDef | None, list[ast.For]]:
    loops: list[ast.For] = []
    cur = mod.parents.get(node)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(cur, ast.For):
            loops.append(cur)
        cur = mod.parents.get(cur)
    return cur, loops[::-1]  # type: ignore[return-value]


def _environments(node: ast.AST, mod: _Module, depth: int = 0) -> list[dict[str, Any]]:
    """Every binding of the names visible at `node` that the module's literal
    loops and call sites give (one environment per combination)."""
    func, loops = _enclosing(node, mod)
    envs: list[dict[str, Any]] = [{}]
    if func is not None and depth < _MAX_CALLER_DEPTH:
        params = [a.arg for a in func.args.posonlyargs + func.args.args]
        callers = [c for c in ast.walk(mod.tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == func.name]
        if params and callers:
            envs = []
            for call in callers:
                for outer in _environments(call, mod, depth + 1):
                    values: list[Any] = []
                    for a in call.args:
                        v = _eval(a.value if isinstance(a, ast.Starred) else a, outer, mod)
                        values.extend(v if isinstance(a, ast.Starred) and isinstance(v, tuple) else [v])
                    env = dict(zip(params, values))
                    env.update({k.arg: _eval(k.value, outer, mod) for k in call.keywords if k.arg})
                    envs.append(env)
    for loop in loops:
        expanded = []
        for env in envs:
            items = _eval(loop.iter, env, mod)
            if isinstance(items, tuple):
                expanded.extend(_bind(loop.target, item, env) for item in items)
        envs = expanded
    return envs


def _condition_text(func: ast.FunctionDef) -> str | None:
    """`return EXPR`, or `if EXPR: return True` then `return False`, in words."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return " ".join(ast.unparse(body[0].value).split())
    if (
        len(body) >= 2
        and isinstance(body[-2], ast.If)
        and not body[-2].orelse
        and len(body[-2].body) == 1
        and isinstance(body[-2].body[0], ast.Return)
        and isinstance(body[-2].body[0].value, ast.Constant)
        and body[-2].body[0].value.value is True
        and isinstance(body[-1], ast.Return)
        and isinstance(body[-1].value, ast.Constant)
        and body[-1].value.value is False
        and all(isinstance(s, ast.Assign) for s in body[:-2])
    ):
        # assignments before the test are named in it; keep them readable
        prefix = "; ".join(" ".join(ast.unparse(s).split()) for s in body[:-2])
        test = " ".join(ast.unparse(body[-2].test).split())
        return f"{prefix}; then {test}" if prefix else test
    return None


class _Reader:
    """The modules of one `torch/_native` directory, read on demand."""

    def __init__(self, native_dir: Path, rel_root: str, origin: Origin | None) -> None:
        self.native_dir = native_dir
        self.rel_root = rel_root  # "torch/_native"
        self.origin = origin
        self.modules: dict[Path, _Module] = {}

    def module(self, path: Path) -> _Module:
        if path not in self.modules:
            rel = f"{self.rel_root}/{path.relative_to(self.native_dir).as_posix()}"
            self.modules[path] = _read_module(path, rel)
        return self.modules[path]

    def loc(self, mod: _Module, line: int) -> Location:
        return Location(mod.rel, line, origin=self.origin)

    def resolve(self, ref: _Ref, mod: _Module, seen: int = 0) -> FunctionRef | None:
        """A module-level name at its definition: a def, an assignment, or
        followed through a relative import."""
        if ref.name in mod.defs:
            d = mod.defs[ref.name]
            return FunctionRef(ref.name, self.loc(mod, d.lineno))
        if ref.name in mod.assigns:
            return FunctionRef(ref.name, self.loc(mod, mod.assigns[ref.name].lineno))
        if ref.name in mod.imports and seen < 4:
            source, attr = mod.imports[ref.name]
            if source.startswith(".") and attr:
                level = len(source) - len(source.lstrip("."))
                base = mod.path.parent
                for _ in range(level - 1):
                    base = base.parent
                target = base.joinpath(*source.lstrip(".").split(".")).with_suffix(".py")
                if target.is_file():
                    return self.resolve(_Ref(attr), self.module(target), seen + 1)
        return None

    def condition_text(self, ref: FunctionRef) -> str | None:
        path = self.native_dir / ref.location.path[len(self.rel_root) + 1 :]
        mod = self.module(path)
        d = mod.defs.get(ref.name)
        if d is not None and d.lineno == ref.location.line:
            return _condition_text(d)
        stmt = mod.assigns.get(ref.name)
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            return None  # built by a factory: its text is the factory call, not a condition
        return None

    def kernels(self, package: Path) -> tuple[FunctionRef, ...]:
        found = []
        for path in sorted(package.rglob("*.py")):
            mod = self.module(path)
            for node in ast.walk(mod.tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for dec in node.decorator_list:
                        text = ast.unparse(dec.func if isinstance(dec, ast.Call) else dec)
                        if text.endswith(_KERNEL_DECORATORS):
                            found.append(FunctionRef(node.name, self.loc(mod, node.lineno)))
                            break
        return tuple(found)


def _registration_calls(mod: _Module) -> Iterator[ast.Call]:
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name == "register_op_override":
                yield node


def _dsl_of(call: ast.Call, mod: _Module) -> tuple[str | None, list[ast.expr]]:
    """The DSL a call registers for and its arguments after the DSL name."""
    f = call.func
    owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
    imported = mod.imports.get(owner or "", ("", None))
    module_name = (imported[1] or imported[0]).rsplit(".", 1)[-1]
    if module_name in _DSL_OF_MODULE:
        return _DSL_OF_MODULE[module_name], list(call.args)
    # registry.register_op_override(backend, lib, op, key, ...)
    return (call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) else None), list(call.args[1:])


@functools.lru_cache(maxsize=256)  # a trace asks once per operator it labels
def static_overrides(
    native_dir: Path, rel_root: str = "torch/_native", origin: Origin | None = None, op_hint: str | None = None
) -> tuple[NativeOverride, ...]:
    """Every override that `native_dir/ops/**` registers, read with `ast`;
    with `op_hint` (an operator's base name) only the files that name it in a
    string literal are parsed, which keeps `where` for other operators cheap."""
    reader = _Reader(native_dir, rel_root, origin)
    ops_dir = native_dir / "ops"
    found: list[NativeOverride] = []
    for path in sorted(ops_dir.rglob("*.py")) if ops_dir.is_dir() else ():
        text = path.read_text(encoding="utf-8")
        if "register_op_override" not in text or (op_hint is not None and f'"{op_hint}' not in text):
            continue
        mod = reader.module(path)
        for call in _registration_calls(mod):
            dsl, args = _dsl_of(call, mod)
            named = {k.arg: k.value for k in call.keywords if k.arg}
            arg_nodes = {name: named.get(name, args[i] if i < len(args) else None) for i, name in enumerate(_ARGS)}
            package = path.parent
            for env in _environments(call, mod):
                v = {name: _eval(node, env, mod) for name, node in arg_nodes.items()}
                if not isinstance(v["op_symbol"], str) or not isinstance(v["dispatch_key"], str):
                    continue  # bound by code this reading does not follow
                refs = {}
                for role in ("cond", "impl"):
                    r = v[role]
                    refs[role] = reader.resolve(r, mod) if isinstance(r, _Ref) else None
                if refs["cond"] is None or refs["impl"] is None:
                    continue
                found.append(
                    NativeOverride(
                        _qualified(v["op_symbol"]),
                        v["dispatch_key"],
                        dsl or "?",
                        refs["cond"],
                        reader.condition_text(refs["cond"]),
                        refs["impl"],
                        reader.loc(mod, call.lineno),
                        reader.kernels(package),
                    )
                )
    unique = {(o.op, o.dispatch_key, o.condition, o.implementation): o for o in found}
    return tuple(unique.values())


# ---------------------------------------------------------------------------
# live registry


def live_overrides(origin: Origin | None = None) -> tuple[NativeOverride, ...]:
    """The overrides the running torch's registry holds, each function located
    with `inspect` (imports torch)."""
    import torch

    try:
        from torch._native import registry
    except ImportError:  # a torch older than its DSL overrides (2.11 has none): nothing is registered
        return ()

    site = Path(torch.__file__).resolve().parent.parent
    result = []
    for (op_symbol, key), nodes in registry._graphs.items():
        for node in nodes:
            cond, impl = (_function_ref(f, site, origin) for f in (node.cond_fn, node.impl_fn))
            result.append(NativeOverride(_qualified(op_symbol), key, node.dsl_name, cond, None, impl, impl.location, registered=bool(node.active)))
    return tuple(result)


def _function_ref(fn: Any, site: Path, origin: Origin | None) -> FunctionRef:
    fn = inspect.unwrap(fn)
    path = Path(inspect.getsourcefile(fn) or "").resolve()
    lines, line = inspect.getsourcelines(fn)
    # getsourcelines starts at the first decorator; the name is on the def line
    line += next((i for i, t in enumerate(lines) if t.lstrip().startswith(("def ", "async def "))), 0)
    try:
        rel = path.relative_to(site).as_posix()
    except ValueError:
        rel = path.name
    return FunctionRef(fn.__name__, Location(rel, line, origin=origin))


# ---------------------------------------------------------------------------
# public


def overrides(op_name: str, static: bool = True, tree: Path | None = None) -> tuple[NativeOverride, ...]:
    """The `torch._native` overrides of `op_name` (`aten::bmm`, `scatter_add.out`).

    Read from the selected tree's `torch/_native` when `tree` is given, else
    from the installed wheel's; with `static=False` each is also checked
    against the live registry: `registered` says whether this process holds
    it, and registered ones are located from the registry's own functions.
    """
    from kernelmap import env

    if tree is not None:
        native_dir, origin = Path(tree) / "torch/_native", None
    else:
        install = env.torch_install()
        native_dir, origin = install.torch_dir / "_native", install.origin
    base = _qualified(op_name).split("::", 1)[1].split(".", 1)[0]
    found = tuple(o for o in static_overrides(native_dir, origin=origin, op_hint=base) if _same_op(o.op, op_name))
    if static:
        return found
    live = [o for o in live_overrides(origin) if _same_op(o.op, op_name)]
    merged = []
    for o in found:
        match = next((x for x in live if x.dispatch_key == o.dispatch_key and x.implementation.name == o.implementation.name), None)
        if match is None:
            merged.append(replace(o, registered=False))
        else:
            live.remove(match)
            # the live functions are what runs; the static reading adds the words
            merged.append(replace(o, condition=match.condition, implementation=match.implementation, registered=True, dsl=match.dsl))
    merged.extend(live)  # registered at run time by code the static reading cannot follow
    return tuple(merged)


def override_nodes(override: NativeOverride) -> CallNode:
    """An override as a call-tree alternative under its operator: the
    condition, then the implementation and its DSL kernels."""
    kernels = tuple(CallNode(k.name, "gpu_kernel", k.location, EdgeKind.LAUNCH) for k in override.kernels)
    impl = CallNode(override.implementation.name, "python", override.implementation.location, None, None, kernels, {"dsl": override.dsl})
    return CallNode(
        f"{override.dsl} override of {override.op}",
        "override",
        override.registered_at,
        EdgeKind.DISPATCHER,
        override.condition_text or f"{override.condition.name}(...)",
        (impl,),
        {
            "dispatch_key": override.dispatch_key,
            "condition_at": str(override.condition.location),
            "aten_runs_when": override.aten_runs_when,
            "registered": override.registered,
        },
    )


def served_by_override(op_name: str, dispatch_key: str | None = None, static: bool = False) -> NativeOverride | None:
    """The override that may serve a traced `op_name` (on `dispatch_key`, when
    given), to label it in a trace; None when ATen's kernel serves it."""
    for o in overrides(op_name, static=static):
        if o.registered is not False and (dispatch_key is None or o.dispatch_key == dispatch_key):
            return o
    return None
