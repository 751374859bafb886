"""Read a native frame's demangled name: the function it belongs to, the
lambda it is, the CPU capability it was compiled for and the dtype case it
serves. Pure text: no index, no torch.

    f = parse_frame("void at::native::AVX2::vectorized_loop<...{lambda(float, float)#1}...>(char**, long, ...)")
    f.function   # 'at::native::AVX2::vectorized_loop'
    f.lookup     # 'at::native::vectorized_loop'   (as the source index names it)
    f.capability # 'AVX2'
    f.dtype      # 'float32'

Note [capability and dtype from a frame]
ATen compiles each file of native/cpu once per CPU capability, inside
`namespace CPU_CAPABILITY`, which the build defines as DEFAULT, AVX2, AVX512
(or ZVECTOR, SVE256): the namespace in a frame's name is the capability that
ran. Kernels in anonymous namespaces lose it from their own name; a deeper
frame of the same stack that has it (the loop the kernel runs) says it for
them. The dtype case is the scalar type of the lambda an AT_DISPATCH case
made: its parameters (`{lambda(c10::Half, c10::Half)#1}`) or the
`Vectorized<T>` it works on; the outermost such lambda is the case taken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelmap import vendors
from kernelmap.observe.symbols import strip_return_type

CAPABILITIES = ("DEFAULT", "AVX2", "AVX512", "ZVECTOR", "SVE256", "SVE")
_CAPABILITY = re.compile(r"\b(?:at::native|at::vec|at::native::[A-Za-z_]+)::(" + "|".join(CAPABILITIES) + r")::")

# C++ scalar types as demangled -> torch dtype names (c10/core/ScalarType.h's list)
CPP_DTYPES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
    "c10::quint8": "quint8",
    "c10::qint8": "qint8",
    "c10::qint32": "qint32",
    "unsigned short": "uint16",
    "unsigned int": "uint32",
    "unsigned long": "uint64",
}
# the ScalarType enumerator each dtype's AT_DISPATCH case names
CASE_NAMES = {
    "float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "complex64": "ComplexFloat",
    "complex128": "ComplexDouble", "complex32": "ComplexHalf", "int64": "Long", "int32": "Int", "int16": "Short",
    "int8": "Char", "uint8": "Byte", "bool": "Bool", "quint8": "QUInt8", "qint8": "QInt8", "qint32": "QInt32",
    "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64", "float8_e4m3fn": "Float8_e4m3fn", "float8_e5m2": "Float8_e5m2",
}
_LAMBDA_ARGS = re.compile(r"\{lambda\(([^(){}]*)\)#\d+\}")
_VECTORIZED = re.compile(r"Vectorized<((?:c10::complex<[^<>]+>|[\w:]+(?: [\w:]+)?))\s*>")


@dataclass(frozen=True)
class NativeFrame:
    """A native frame's name, read."""

    raw: str  # as the symbol table demangles it
    function: str  # the named function that holds the code: `at::native::(anonymous namespace)::add_kernel`
    lookup: str  # `function` without anonymous, inline and capability namespaces: the source index's name
    lambda_path: tuple[str, ...] = ()  # the lambdas inside `function` the code is in, outermost first
    capability: str | None = None
    dtype: str | None = None
    clone: str | None = None  # `.isra.0`, `.constprop.0`: a copy the compiler specialised
    # a `c10::function_ref<...>::callback_fn<F>` runs F's `operator()` inlined: F's function
    # (`at::native::VectorizedLoop2d`, `at::native::add_kernel` for a lambda of it)
    runs: str | None = None

    @property
    def short(self) -> str:
        """The function's own name (`add_kernel`; a structured kernel as `structured_mm_out_cpu::impl`)."""
        parts = split_scope(self.lookup)
        if len(parts) >= 2 and parts[-1] in ("impl", "meta") and parts[-2].startswith("structured_"):
            return "::".join(parts[-2:])
        return parts[-1] if parts else self.lookup

    @property
    def dtype_case(self) -> str | None:
        return f"ScalarType::{CASE_NAMES[self.dtype]}" if self.dtype in CASE_NAMES else None


def split_scope(name: str) -> list[str]:
    """`a::b<c::d>::e(f::g)` -> ['a', 'b<c::d>', 'e(f::g)']: `::` outside brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(name):
        ch = name[i]
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == ":" and depth == 0 and name.startswith("::", i):
            parts.append(name[start:i])
            start = i + 2
            i += 2
            continue
        i += 1
    parts.append(name[start:])
    return [p for p in parts if p]


def _strip_brackets(part: str) -> str:
    """A scope part's name alone: `vectorized_loop<...>(...)` -> `vectorized_loop`, `operator()` kept."""
    if part.startswith("operator"):
        return part.split("(", 1)[0] if not part.startswith("operator()") else "operator()"
    out, depth = [], 0
    for ch in part:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip()


def _has_parameters(part: str) -> bool:
    """Whether a scope part is a function with its parameter list (a `(` outside template brackets)."""
    if part.startswith(("(anonymous namespace)", "{lambda")):
        return False
    if part.startswith("operator()"):
        return True
    depth = 0
    for ch in part:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return True
    return False


def demangle(name: str) -> str:
    """A name gdb left mangled (it gives up on very long ones), demangled with cxxfilt."""
    if not name.startswith("_Z"):
        return name
    import cxxfilt

    try:
        return cxxfilt.demangle(name.split(" ", 1)[0])
    except cxxfilt.InvalidName:
        return name


def parse_frame(raw: str) -> NativeFrame:
    """Read a demangled native frame name (Note [capability and dtype from a frame])."""
    name = demangle(raw.strip())
    libc = re.fullmatch(r"__(memcpy|memmove|memset|mempcpy)_\w+", name)
    if libc:  # glibc's implementation picked for this CPU (__memcpy_avx512_unaligned_erms) is memcpy
        return NativeFrame(raw, libc.group(1), libc.group(1))
    sleef = vendors.sleef_name(name)
    if sleef:  # SLEEF's vector-ABI alias of the function the tree calls (Note [SLEEF's vector-ABI names] in kernelmap.vendors)
        return NativeFrame(raw, sleef, sleef)
    clone = None
    m = re.search(r" \[clone ([^\]]+)\]$", name)
    while m:
        clone = m.group(1)
        name = name[: m.start()]
        m = re.search(r" \[clone ([^\]]+)\]$", name)
    name = strip_return_type(name)
    if name.endswith(" const"):
        name = name[: -len(" const")]
    parts = split_scope(name)
    # the function: scope parts up to the first that is a function (has parameters) and is no lambda
    function_parts: list[str] = []
    lambdas: list[str] = []
    seen_function = False
    for part in parts:
        if not seen_function:
            function_parts.append(part)
            if _has_parameters(part):
                seen_function = True
        elif part.startswith("{lambda"):
            lambdas.append(part)
    names = [_strip_brackets(p) if not p.startswith("(anonymous namespace)") else p for p in function_parts]
    function = "::".join(names)
    lookup = "::".join(n for n in names if n not in ("(anonymous namespace)", "__1", "__cxx11") and n not in CAPABILITIES)
    capability = None
    cm = _CAPABILITY.search(name)
    if cm:
        capability = cm.group(1)
    # only ATen's AT_DISPATCH lambdas name a dtype case: a library's `(int, int)` lambda is its thread range
    dtype = frame_dtype(name) if "at::native::" in name or "at::vec::" in name else None
    return NativeFrame(raw, function, lookup, tuple(lambdas), capability, dtype, clone, _callback_target(parts))


def _callback_target(parts: list[str]) -> str | None:
    if len(parts) < 2 or not parts[-1].startswith("callback_fn<") or not parts[-2].startswith("function_ref"):
        return None
    inner = parts[-1][len("callback_fn<") :]
    depth, end = 1, len(inner)
    for i, ch in enumerate(inner):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
            if depth == 0:
                end = i
                break
    arg = inner[:end].strip()
    last = split_scope(arg)[-1] if arg else ""
    target = parse_frame(arg if last.startswith("{lambda") or "(" in last else arg + "()")
    return target.lookup or None


def frame_dtype(name: str) -> str | None:
    """The dtype of the `Vectorized<T>` a frame works on, else of the outermost
    lambda with scalar parameters; a `(long, long)` lambda is a
    `parallel_for` body's range unless nothing else says (an int64 case)."""
    vm = _VECTORIZED.search(name)
    if vm and vm.group(1).strip() in CPP_DTYPES:
        return CPP_DTYPES[vm.group(1).strip()]
    ranges = None
    for m in _LAMBDA_ARGS.finditer(name):
        args = [a.strip().replace(" const", "").rstrip("&*").strip() for a in m.group(1).split(",") if a.strip()]
        found = next((CPP_DTYPES[a] for a in args if a in CPP_DTYPES), None)
        if found is None:
            continue
        if args == ["long", "long"]:
            ranges = ranges or found
            continue
        return found
    return ranges


def stack_capability(frames: list[NativeFrame]) -> list[str | None]:
    """Each frame's capability, an anonymous kernel taking it from a deeper
    frame inside the same function (Note [capability and dtype from a frame]).
    `frames` run innermost first."""
    out: list[str | None] = []
    for i, f in enumerate(frames):
        cap = f.capability
        if cap is None:
            for deeper in frames[:i]:
                if deeper.capability and f.function and f.function in deeper.raw:
                    cap = deeper.capability
                    break
        out.append(cap)
    return out
