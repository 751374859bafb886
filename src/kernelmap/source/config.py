"""A build configuration per device: which preprocessor macros an official
release build of a tree defines for CPU, CUDA or ROCm, read from the tree's
CMake (its `option()` defaults and the `#cmakedefine`-style config headers),
and for the installed torch's own device from the headers the wheel ships
(`torch/include/ATen/Config.h`). `evaluate` answers an `#if` condition
under it: True, False, or None when the condition names a macro the model
does not know (Note [build configuration]).

Note [build configuration]
A tree holds every alternative of an `#if`; a build compiles one. The model
follows an official Linux x86-64 release build: CUDA builds set USE_CUDA
(and so USE_CUDNN, USE_CUSPARSELT by CMake's dependent options), ROCm builds
USE_ROCM, CPU builds neither; MKL-DNN, MKL, NNPACK and XNNPACK are on (CMake
defaults on x86-64); mobile macros are off (C10_MOBILE, and C10_IOS and
C10_ANDROID, which c10/macros/Macros.h defines for Apple's phones and
Android only). `AT_X_ENABLED()` of ATen's config headers follows CMake's
`USE_X`. Where the installed torch is built for the device asked about, the
values its own Config.h spells win. Conditions naming anything else are left
undecided, and the graph shows every alternative under its condition, as
before.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

# Platform variables CMake's dependent options test: a Linux x86-64 build.
_PLATFORM = {"LINUX": 1, "UNIX": 1, "WIN32": 0, "APPLE": 0, "MSVC": 0, "ANDROID": 0, "IOS": 0, "CPU_INTEL": 1, "CPU_AARCH64": 0}

# Options a release build sets per device (the rest keep CMake's defaults).
_DEVICE_OPTIONS = {
    "cpu": {"USE_CUDA": 0, "USE_ROCM": 0, "USE_XPU": 0, "USE_MPS": 0},
    "cuda": {"USE_CUDA": 1, "USE_ROCM": 0, "USE_XPU": 0, "USE_MPS": 0},
    "rocm": {"USE_CUDA": 0, "USE_ROCM": 1, "USE_XPU": 0, "USE_MPS": 0},
    "mps": {"USE_CUDA": 0, "USE_ROCM": 0, "USE_XPU": 0, "USE_MPS": 1},
    "meta": {"USE_CUDA": 0, "USE_ROCM": 0, "USE_XPU": 0, "USE_MPS": 0},
}

# Macros no CMake option spells, fixed for a desktop/server release build.
_FIXED = {"AT_MKL_ENABLED": 1, "C10_MOBILE": 0, "C10_IOS": 0, "C10_ANDROID": 0, "BUILD_LITE_INTERPRETER": 0, "FBCODE_CAFFE2": 0, "C10_MOBILE_TRIM_DISPATCH_KEYS": 0,
          "_WIN32": 0, "_MSC_VER": 0, "__APPLE__": 0, "__ANDROID__": 0, "AT_PER_OPERATOR_HEADERS": 1}

_OPTION = re.compile(r"^\s*option\(\s*(\w+)\s+\"[^\"]*\"\s+(\w+)\s*\)", re.M)
_DEPENDENT = re.compile(r"^\s*cmake_dependent_option\(\s*(\w+)\s+\"[^\"]*\"\s+(\w+|\"\$\{\w+\}\")\s+\"([^\"]*)\"\s+(\w+)\s*\)", re.M | re.S)
_CONFIG_MACRO = re.compile(r"^#define\s+(AT_\w+)(\(\))?\s+@(\w+)@", re.M)
_INSTALLED_MACRO = re.compile(r"^#define\s+(AT_\w+)(?:\(\))?\s+(\d+)\s*$", re.M)
_CONFIG_HEADERS = ("aten/src/ATen/Config.h.in", "aten/src/ATen/cuda/CUDAConfig.h.in")


@dataclass(frozen=True)
class BuildConfig:
    """The macros one device's release build defines (value 0 = defined as 0
    or not defined), each with where it was read."""

    device: str
    macros: dict[str, int] = field(hash=False)
    sources: dict[str, str] = field(hash=False)  # macro -> "CMakeLists.txt", "installed torch 2.13.0+cpu", "release build"

    def value(self, name: str) -> int | None:
        return self.macros.get(name)

    def evaluate(self, condition: str | None) -> bool | None:
        """Whether this build compiles code under `condition` (None: undecided)."""
        if not condition:
            return True
        return _evaluate(condition, self.macros)

    def why(self, condition: str) -> str:
        """The macros of `condition` the model knows, with their values and where they come from."""
        names = dict.fromkeys(re.findall(r"[A-Za-z_]\w*", condition))
        known = [f"{n}={self.macros[n]} ({self.sources.get(n, 'release build')})" for n in names if n in self.macros]
        return ", ".join(known)


def _cmake_options(text: str, preset: dict[str, int]) -> dict[str, int]:
    values = dict(_PLATFORM)
    values.update(preset)
    for name, default in _OPTION.findall(text):
        values.setdefault(name, 1 if default.upper() == "ON" else 0)
    for name, default, depends, otherwise in _DEPENDENT.findall(text):
        if name in preset:
            continue
        met = all(_cmake_true(clause.strip(), values) for clause in depends.split(";") if clause.strip())
        variable = re.fullmatch(r'"\$\{(\w+)\}"', default)
        on = bool(values.get(variable.group(1), 0)) if variable else default.upper() == "ON"
        values[name] = int(on) if met else (1 if otherwise.upper() == "ON" else 0)
    return values


def _cmake_true(clause: str, values: dict[str, int]) -> bool:
    """One clause of a dependent option's condition: `USE_CUDA`, `NOT WIN32`, `USE_X AND LINUX`."""
    parts = re.split(r"\s+(AND|OR)\s+", clause)
    result = None
    op = "AND"
    for part in parts:
        if part in ("AND", "OR"):
            op = part
            continue
        negate = part.startswith("NOT ")
        name = part[4:].strip() if negate else part.strip()
        value = bool(values.get(name, 0)) != negate
        result = value if result is None else (result and value if op == "AND" else result or value)
    return bool(result)


def installed_device(site_packages: Path | None) -> str | None:
    """The device the installed torch is built for, read from torch/version.py (never imported)."""
    if site_packages is None:
        return None
    try:
        text = (site_packages / "torch" / "version.py").read_text()
    except OSError:
        return None
    if re.search(r"^hip:[^=]*=\s*['\"]", text, re.M):
        return "rocm"
    if re.search(r"^cuda:[^=]*=\s*['\"]", text, re.M):
        return "cuda"
    return "cpu"


@functools.lru_cache(maxsize=16)
def build_config(tree_root: Path, device: str, site_packages: Path | None = None) -> BuildConfig:
    """The release build's macros for `device` (cpu, cuda, rocm, ...) of the tree at `tree_root`."""
    preset = _DEVICE_OPTIONS.get(device, _DEVICE_OPTIONS["cpu"])
    try:
        cmake = (tree_root / "CMakeLists.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cmake = ""
    options = _cmake_options(cmake, preset)
    macros: dict[str, int] = {}
    sources: dict[str, str] = {}
    for name, value in options.items():
        if name.startswith("USE_"):
            # CMake passes -DUSE_X for the options the sources test with defined(USE_X)
            macros[name] = value
            sources[name] = "CMakeLists.txt" if name not in preset else f"release build for {device}"
    for header in _CONFIG_HEADERS:
        try:
            text = (tree_root / header).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for macro, _, variable in _CONFIG_MACRO.findall(text):
            m = re.fullmatch(r"AT_(\w+)_ENABLED", variable)
            option = f"USE_{m.group(1)}" if m else None
            if option in options:
                macros[macro] = options[option]
                sources[macro] = f"{header} <- CMakeLists.txt {option}"
    macros.setdefault("AT_CUDNN_ENABLED", options.get("USE_CUDNN", 0))
    macros["AT_ROCM_ENABLED"] = options.get("USE_ROCM", 0)
    sources["AT_ROCM_ENABLED"] = f"release build for {device}"
    for name, value in _FIXED.items():
        macros[name] = value
        sources[name] = "release build"
    if device == "rocm":
        macros["__HIP_PLATFORM_AMD__"] = macros["USE_ROCM"] = 1
    else:
        macros["__HIP_PLATFORM_AMD__"] = 0
    if site_packages is not None and installed_device(site_packages) == device:
        try:
            text = (site_packages / "torch" / "include" / "ATen" / "Config.h").read_text()
        except OSError:
            text = ""
        for macro, value in _INSTALLED_MACRO.findall(text):
            macros[macro] = int(value)
            sources[macro] = "the installed torch's ATen/Config.h"
    return BuildConfig(device, macros, sources)


# -- #if conditions, three-valued ------------------------------------------

_TOKEN = re.compile(r"\s*(defined\s*\(\s*\w+\s*\)|defined\s+\w+|\w+\s*\(\s*\)|\w+|&&|\|\||==|!=|>=|<=|[!()<>])")


def _evaluate(condition: str, macros: dict[str, int]) -> bool | None:
    tokens = []
    pos = 0
    text = condition.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            return None  # arithmetic, strings: not for this model
        tokens.append(m.group(1))
        pos = m.end()
    parser = _Parser(tokens, macros)
    try:
        value = parser.expression()
    except _Undecided:
        return None
    if parser.i != len(tokens):
        return None
    return None if value is None else bool(value)


class _Undecided(Exception):
    pass


class _Parser:
    """`||`, `&&`, `!`, comparisons, parentheses; values are ints or None (unknown)."""

    def __init__(self, tokens: list[str], macros: dict[str, int]):
        self.tokens, self.i, self.macros = tokens, 0, macros

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def expression(self):
        value = self.conjunction()
        while self.peek() == "||":
            self.i += 1
            other = self.conjunction()
            value = 1 if (value or other) else (None if value is None or other is None else 0)
        return value

    def conjunction(self):
        value = self.comparison()
        while self.peek() == "&&":
            self.i += 1
            other = self.comparison()
            value = 0 if (value == 0 or other == 0) else (None if value is None or other is None else 1)
        return value

    def comparison(self):
        value = self.unary()
        op = self.peek()
        if op in ("==", "!=", ">=", "<=", ">", "<"):
            self.i += 1
            other = self.unary()
            if value is None or other is None:
                return None
            return int({"==": value == other, "!=": value != other, ">=": value >= other, "<=": value <= other, ">": value > other, "<": value < other}[op])
        return value

    def unary(self):
        token = self.peek()
        if token is None:
            raise _Undecided()
        self.i += 1
        if token == "!":
            value = self.unary()
            return None if value is None else int(not value)
        if token == "(":
            value = self.expression()
            if self.peek() != ")":
                raise _Undecided()
            self.i += 1
            return value
        if token.startswith("defined"):
            name = re.search(r"(\w+)\s*\)?\s*$", token[len("defined"):]).group(1)
            value = self.macros.get(name)
            return None if value is None else int(bool(value))
        if token.isdigit():
            return int(token)
        name = re.match(r"\w+", token).group(0)
        return self.macros.get(name)
