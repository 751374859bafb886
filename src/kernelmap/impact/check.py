"""The include graph against the compiler's own dependency output: `g++ -MM
-MG` (and `nvcc -M` for .cu units) run on a unit with the include roots of
a release build (Note [include roots] in kernelmap.impact.graph), the
headers kernelmap regenerates, the installed wheel's configuration headers
(`ATen/Config.h`, `c10/macros/cmake_macros.h`, `caffe2/core/macros.h`,
`torch/version.h`; a CPU wheel has no CUDA ones, which are configured here
from the tree's templates with the model's values) and the `-D` flags of the
device's build configuration. Each dependency the compiler names is mapped
back to the file kernelmap names (a configured header to its template);
third-party and system headers are left out on both sides (`-MG` names a
missing header and reads on without it, as kernelmap does).

    layout = CompileLayout.create(tree_root, headers_dir, sources_dir, work_dir, "cpu")
    result = check_unit(graph, layout, unit)      # DependencyCheck
    result.agreement                              # common / union of the two sets
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelmap.impact.graph import ROOTS, IncludeGraph, MacroEnvironment
from kernelmap.impact.units import Unit

# The wheel's configured headers (under torch/include), by the name code includes them as.
WHEEL_CONFIG_HEADERS = {
    "ATen/Config.h": "ATen/Config.h",
    "c10/macros/cmake_macros.h": "c10/macros/cmake_macros.h",
    "caffe2/core/macros.h": "caffe2/core/macros.h",
    "torch/version.h": "torch/csrc/api/include/torch/version.h",
}
# What those include in turn in newer wheels (torch 2.10+ moved them): copied beside them.
_WHEEL_CONFIG_EXTRA = ("torch/headeronly/macros/cmake_macros.h", "torch/headeronly/version.h")
# Configured from the tree's templates for CUDA and ROCm builds (a CPU wheel ships none).
TEMPLATE_CONFIG_HEADERS = ("ATen/cuda/CUDAConfig.h", "c10/cuda/impl/cuda_cmake_macros.h", "ATen/hip/HIPConfig.h")

_CAPABILITY_FLAGS = {
    "DEFAULT": [],
    "AVX2": ["-mavx2", "-mfma", "-mf16c", "-mno-avx256-split-unaligned-load", "-mno-avx256-split-unaligned-store"],
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"],
}


@dataclass(frozen=True)
class DependencyCheck:
    """One unit's dependencies as the compiler names them and as kernelmap does."""

    unit: str  # the unit's name (a capability copy: `...cpp.AVX2.cpp`)
    context: str
    compiler: str  # "g++ -MM" | "nvcc -M"
    ours: frozenset[str]
    theirs: frozenset[str]
    seconds: float
    error: str | None = None  # the compiler failed: why (its last line)
    maybe: frozenset[str] = field(default=frozenset())  # ours reached only through undecided conditions
    wheel_only: frozenset[str] = field(default=frozenset())  # config headers of a newer wheel the tree has no file for

    @property
    def common(self) -> int:
        return len(self.ours & self.theirs)

    @property
    def agreement(self) -> float:
        union = len(self.ours | self.theirs)
        return self.common / union if union else 1.0

    @property
    def only_ours(self) -> list[str]:
        return sorted(self.ours - self.theirs)

    @property
    def only_theirs(self) -> list[str]:
        return sorted(self.theirs - self.ours)


@dataclass
class CompileLayout:
    """Where the compiler finds everything, and how its paths map back."""

    device: str
    tree_root: Path
    headers_dir: Path  # the regenerated headers' root: holds build/aten/src/ATen
    sources_dir: Path  # the regenerated sources' root: build/aten/src/ATen, torch/csrc/autograd/generated
    config_dir: Path  # configured headers, by the name code includes them as
    config_templates: dict[str, str]  # config header name -> its template's repository path
    defines: list[str]  # -D flags
    wheel_only: set[str] = field(default_factory=set)

    @property
    def stubs_dir(self) -> Path:
        """Empty stand-ins for the third-party headers nvcc cannot find (searched last)."""
        return self.config_dir.parent / f"stubs-{self.device}"

    @classmethod
    def create(cls, tree_root: Path, headers_dir: Path, sources_dir: Path, work: Path, device: str, wheel_include: Path | None) -> CompileLayout:
        """A layout under `work` (the configured headers are written there)."""
        config_dir = work / f"config-{device}"
        shutil.rmtree(config_dir, ignore_errors=True)
        config_dir.mkdir(parents=True)
        templates: dict[str, str] = {}
        wheel_only: set[str] = set()
        env = MacroEnvironment(tree_root, device, [])
        if wheel_include is not None:
            for name, shipped in WHEEL_CONFIG_HEADERS.items():
                source = wheel_include / shipped
                if source.is_file():
                    (config_dir / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, config_dir / name)
            for name in _WHEEL_CONFIG_EXTRA:
                if (wheel_include / name).is_file():
                    (config_dir / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(wheel_include / name, config_dir / name)
                    wheel_only.add(name)
        for name in (*WHEEL_CONFIG_HEADERS, *TEMPLATE_CONFIG_HEADERS):
            template = _template_of(tree_root, name)
            if template is None:
                continue
            templates[name] = template
            if not (config_dir / name).exists() and (device != "cpu" or name not in TEMPLATE_CONFIG_HEADERS):
                (config_dir / name).parent.mkdir(parents=True, exist_ok=True)
                (config_dir / name).write_text(configure(tree_root / template, env))
        # the -D flags of the model's configuration: every option on, and the release build's own
        flags = ("AT_PER_OPERATOR_HEADERS", "HAVE_AVX2_CPU_DEFINITION", "HAVE_AVX512_CPU_DEFINITION", "NDEBUG")
        defines = [f"-D{k}" for k, v in sorted(env.context_macros("cpp").items()) if v and (k.startswith("USE_") or k in flags)]
        return cls(device, tree_root, headers_dir, sources_dir, config_dir, templates, defines, wheel_only)

    def include_flags(self) -> list[str]:
        """Note [include roots], each root where a build has it: the
        regenerated headers and sources for build/aten/src, the configured
        headers for build/ (a release build writes some of them into the
        tree itself: searched there, they are found at the same place)."""
        flags = []
        for root in ROOTS:
            if root == "build/aten/src":
                flags += ["-I", str(self.headers_dir / root), "-I", str(self.sources_dir / root)]
            elif root == "build":
                flags += ["-I", str(self.config_dir)]
            elif root == "":
                flags += ["-I", str(self.tree_root), "-I", str(self.sources_dir)]
            else:
                flags += ["-I", str(self.tree_root / root)]
        import sysconfig

        python = sysconfig.get_paths().get("include")  # libtorch_python's units include Python.h (third-party: left out of the comparison)
        if python and Path(python).is_dir():
            flags += ["-I", python]
        return flags

    def source_file(self, path: str) -> Path:
        if path.startswith("build/") or "/generated/" in path:
            return self.sources_dir / path
        return self.tree_root / path

    def command(self, unit: Unit, output: Path | None = None) -> list[str]:
        """The compiler's dependency command for `unit` (or, given `output`, a
        real compile into that object file)."""
        source = str(self.source_file(unit.path))
        if unit.kind == "cu":
            cmd = ["nvcc", "-std=c++17", "-x", "cu", "--expt-extended-lambda", "--expt-relaxed-constexpr", "-DCUDA_HAS_FP16=1",
                   "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                   "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", *self.defines, *self.include_flags(), "-I", str(self.stubs_dir)]
            return cmd + (["-O2", "-c", source, "-o", str(output)] if output else ["-M", source])
        cmd = ["g++", "-std=c++17", "-O2", "-fPIC", "-x", "c++", *self.defines, *self.include_flags()]
        if unit.capability:
            cmd += [f"-DCPU_CAPABILITY={unit.capability}", f"-DCPU_CAPABILITY_{unit.capability}", *_CAPABILITY_FLAGS.get(unit.capability, [])]
        return cmd + (["-c", source, "-o", str(output)] if output else ["-MM", "-MG", source])

    def repository_path(self, dep: str) -> str | None:
        """The repository path of a dependency the compiler names; None for
        one outside the tree and the regenerated files (third-party, system)."""
        path = os.path.normpath(dep)
        for base, prefix in ((self.headers_dir, ""), (self.sources_dir, ""), (self.config_dir, None), (self.tree_root, "")):
            base_text = str(base) + os.sep
            if path.startswith(base_text):
                rel = path[len(base_text):].replace(os.sep, "/")
                if prefix is None:
                    return self.config_templates.get(rel, f"wheel:{rel}")
                return rel
        return None


def _template_of(tree_root: Path, name: str) -> str | None:
    for root in ROOTS:
        source_root = root[len("build/"):] if root.startswith("build/") else ("" if root == "build" else root)
        rel = f"{source_root}/{name}.in" if source_root else f"{name}.in"
        if (tree_root / rel).is_file():
            return rel
    return None


_CMAKEDEFINE = re.compile(r"^#cmakedefine\s+(\w+)(.*)$", re.M)
_AT_VARIABLE = re.compile(r"@(\w+)@|\$\{(\w+)\}")


def configure(template: Path, env: MacroEnvironment) -> str:
    """A `.h.in` template configured as cmake's configure_file would with the model's values."""
    text = template.read_text(encoding="utf-8", errors="replace")

    def value(name: str) -> str:
        _, v = env.macro(name, "cpp")
        return "" if v is None else str(int(v))

    text = _CMAKEDEFINE.sub(lambda m: f"#define {m.group(1)}{m.group(2)}" if value(m.group(1)) not in ("", "0") else f"/* #undef {m.group(1)} */", text)
    return _AT_VARIABLE.sub(lambda m: value(m.group(1) or m.group(2)) or "0", text)


_MISSING = re.compile(r"fatal error: ([^:\s]+): No such file or directory")
MAX_STUBS = 60  # per unit: nvcc has no -MG, so each missing header is stubbed and the run repeated


def compiler_dependencies(layout: CompileLayout, unit: Unit, timeout: float = 300) -> tuple[set[str], str | None, float]:
    """(repository paths of the unit's dependencies, the compiler's error or
    None, CPU seconds the compiler took). nvcc has no `-MG`: a header it
    cannot find (a third-party one) is written empty into a stubs folder
    searched last, and it runs again, which is what `-MG` does."""
    cmd = layout.command(unit)
    seconds = 0.0
    for _ in range(MAX_STUBS):
        before = os.times()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            return set(), f"{cmd[0]}: {e}", seconds
        after = os.times()
        seconds += (after.children_user + after.children_system) - (before.children_user + before.children_system)
        missing = _MISSING.search(done.stderr) if unit.kind == "cu" and done.returncode != 0 else None
        if missing is None or ".." in missing.group(1):
            break
        stub = layout.stubs_dir / missing.group(1)
        if stub.exists():
            break
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("")
    error = None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        error = lines[0][:300]
    text = done.stdout.replace("\\\n", " ")
    _, _, deps = text.partition(":")
    found = set()
    for dep in deps.split():
        rel = layout.repository_path(dep if os.path.isabs(dep) else os.path.join(os.getcwd(), dep))
        if rel is not None:
            found.add(rel)
    return found, error, seconds


def check_unit(graph: IncludeGraph, layout: CompileLayout, unit: Unit) -> DependencyCheck:
    """The unit's dependencies by the compiler and by kernelmap's graph."""
    t0 = time.perf_counter()
    theirs, error, _ = compiler_dependencies(layout, unit)
    node = graph.node(unit.path)
    ours: set[str] = set()
    sure: set[str] = set()
    if node is not None:
        ours = {graph.paths[n] for n in graph.closure(node, unit.context)}
        sure = {graph.paths[n] for n in graph.closure(node, unit.context, undecided=False)}
    wheel_only = {d for d in theirs if d.startswith("wheel:")}
    theirs -= wheel_only
    compiler = "nvcc -M" if unit.kind == "cu" else "g++ -MM"
    return DependencyCheck(unit.name, unit.context, compiler, frozenset(ours), frozenset(theirs), time.perf_counter() - t0, error,
                           frozenset(ours - sure), frozenset(wheel_only))


# ---------------------------------------------------------------------------
# Samples, explanations, real compiles
# ---------------------------------------------------------------------------

AREAS = ("aten", "c10", "torch/csrc", "generated")


def area_of(path: str) -> str:
    if path.startswith("build/") or "/generated/" in path:
        return "generated"
    if path.startswith("torch/csrc/"):
        return "torch/csrc"
    return path.split("/", 1)[0]


def sample_units(units: list[Unit] | tuple[Unit, ...], n: int, seed: int = 0, kinds: tuple[str, ...] = ("cpp", "capability", "cu")) -> list[Unit]:
    """`n` units spread over aten, c10, torch/csrc and the generated files (a
    fair share each, at least an eighth of `n` where there are that many),
    each kind present; the same units for the same seed."""
    import random

    rng = random.Random(seed)
    pools: dict[str, list[Unit]] = {}
    for u in sorted(units, key=lambda u: u.name):
        if u.kind in kinds:
            pools.setdefault(area_of(u.path), []).append(u)
    for pool in pools.values():
        rng.shuffle(pool)
    total = sum(len(p) for p in pools.values())
    share = {a: min(len(p), max(n // 8, round(n * len(p) / max(total, 1)))) for a, p in pools.items()}
    picked: list[Unit] = []
    for area, pool in pools.items():
        # each kind first, then the rest in the shuffled order
        first = list({u.kind: u for u in reversed(pool)}.values())
        chosen = first + [u for u in pool if u not in first]
        picked.extend(chosen[: share[area]])
    rest = [u for p in pools.values() for u in p if u not in picked]
    rng.shuffle(rest)
    picked.extend(rest[: max(0, n - len(picked))])
    return sorted(picked[:n], key=lambda u: u.name)


def explain(result: DependencyCheck, layout: CompileLayout) -> dict[str, list[str]]:
    """The disagreements of one check, by cause:
    `pragma once twin`: a file GCC skipped as byte-identical to one it had
    read (its `#pragma once` compares contents, and torchgen writes the same
    empty `_native.h` for several operators in the same second);
    `undecided`: reached only through a condition the model cannot decide;
    `other`: the rest, unexplained."""
    out: dict[str, list[str]] = {"pragma once twin": [], "undecided": [], "other": []}
    read: dict[int, list[Path]] = {}
    for path in result.theirs & result.ours:
        disk = _disk(layout, path)
        try:
            size = disk.stat().st_size
        except OSError:
            continue
        read.setdefault(size, []).append(disk)
    for path in result.only_ours:
        disk = _disk(layout, path)
        twin = False
        try:
            data = disk.read_bytes()
            twin = any(other.read_bytes() == data for other in read.get(len(data), ()) if other != disk)
        except OSError:
            pass
        if twin and b"#pragma once" in data:
            out["pragma once twin"].append(path)
        elif path in result.maybe:
            out["undecided"].append(path)
        else:
            out["other"].append(path)
    out["other"].extend(result.only_theirs)
    return {k: v for k, v in out.items() if v}


def _disk(layout: CompileLayout, path: str) -> Path:
    if path.startswith("build/aten/src/"):
        headers = layout.headers_dir / path
        return headers if headers.exists() else layout.sources_dir / path
    if "/generated/" in path:
        return layout.sources_dir / path
    return layout.tree_root / path


def compile_seconds(layout: CompileLayout, unit: Unit, work: Path, third_party: list[Path], timeout: float = 900) -> tuple[float, str | None]:
    """CPU seconds (user + system of the compiler and its children) of
    compiling `unit` for real, with `third_party` include folders searched
    after the tree's (the wheel's torch/include ships the third-party
    headers the Debian tree lacks); the error line when it failed."""
    out = work / "unit.o"
    cmd = layout.command(unit, out) + ["-w"]
    for folder in third_party:
        cmd += ["-I", str(folder)]
    before = os.times()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 0.0, f"{cmd[0]}: {e}"
    finally:
        out.unlink(missing_ok=True)
    after = os.times()
    seconds = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if "error" in line] or [f"exit status {done.returncode}"]
        return seconds, lines[0][:300]
    return seconds, None
