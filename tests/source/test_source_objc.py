"""Objective-C++ read as the C++ it stands for (Note [Objective-C++]), and the
attribute macros that come before a lambda's parameters: rewritten byte for
byte, parsed without errors, and the real MPS files of 2.6.0 indexed under
their real names."""

from __future__ import annotations

import re

import pytest
import tree_sitter
import tree_sitter_cpp

from kernelmap.source import extract, masking, objc
from kernelmap.source.facts import OperatorNames

from .conftest import line_of

_LANGUAGE = tree_sitter.Language(tree_sitter_cpp.language())
_ERRORS = tree_sitter.Query(_LANGUAGE, "(ERROR) @error (MISSING) @missing")
_CALLS = tree_sitter.Query(_LANGUAGE, "(call_expression function: (_) @callee)")


def parse(data: bytes):
    return tree_sitter.Parser(_LANGUAGE).parse(data).root_node


def problems(root) -> list[str]:
    found = tree_sitter.QueryCursor(_ERRORS).captures(root)
    return [f"{name} at {n.start_point}: {n.text[:40]!r}" for name, nodes in found.items() for n in nodes]


def callees(root) -> set[bytes]:
    return {n.text for n in tree_sitter.QueryCursor(_CALLS).captures(root).get("callee", [])}


OBJC_BODY = b"""\
at::Tensor& f(const at::Tensor& self) {
  @autoreleasepool {
    MPSGraphTensor* t = [mpsGraph castTensor:getMPSShape(self) toType:MPSDataTypeInt32 name:@"cast:x"];
    id<MTLBuffer> b = [[MPSCNNNeuron alloc] initWithDevice:[MetalContext sharedInstance].device];
    auto axes = [NSMutableArray<NSNumber*> arrayWithCapacity:num_dims(self)];
    NSArray* a = @[ @1, @-1, ];
    NSArray* e = @[];
    NSDictionary* d = @{@"k" : @(x), @"j" : y};
    if (@available(macOS 13.0, *)) {
      g(a[1]);
    }
    SEL s = @selector(foo:bar:);
    dispatch_sync(q, ^() { h(); });
    stream->addCompletedHandler(^(id<MTLCommandBuffer>) { k(); });
    run(^MPSGraphTensor*(MPSGraph* graph, MPSGraphTensor* t) { return [graph identityWithTensor:t name:nil]; });
    for (id x in xs) {
      use(x);
    }
    void* p = (__bridge void*)b;
    return [self count] ? self : self;
  }
}
"""


def test_objective_c_in_a_function_becomes_c_that_parses_without_an_error():
    assert problems(parse(OBJC_BODY)), "the grammar cannot read Objective-C as it is"
    rewritten = objc.rewrite(OBJC_BODY)
    assert len(rewritten) == len(OBJC_BODY)
    assert [i for i, b in enumerate(rewritten) if b == 10] == [i for i, b in enumerate(OBJC_BODY) if b == 10]
    root = parse(rewritten)
    assert problems(root) == []
    # What the messages pass stays a call; a selector is no call.
    assert {b"getMPSShape", b"num_dims", b"g", b"h", b"k", b"use"} <= callees(root)
    assert not callees(root) & {b"castTensor", b"available", b"selector", b"alloc", b"identityWithTensor"}


def test_classes_are_blanked_and_a_method_is_read_as_a_member_named_by_its_selector():
    text = b"""\
@interface Runner : NSObject
typedef BOOL (^testBlock)(void);
+ (instancetype)sharedInstance;
@property(nonatomic) int x;
@end
@class Foo, Bar;
@implementation Runner
- (void)encode:(id<MTLComputeCommandEncoder>)encoder sourceImage:(MPSImage*)image {
  at::native::metal::neuron(t);
}
@end
namespace at::native {
void after() {}
}
"""
    rewritten = objc.rewrite(text)
    assert len(rewritten) == len(text) and rewritten.count(b"\n") == text.count(b"\n")
    assert problems(parse(rewritten)) == []
    facts = extract.Extractor(OperatorNames(frozenset(), frozenset())).extract("aten/src/ATen/native/metal/Runner.mm", text)
    assert [(d.name, d.kind, d.line) for d in facts.definitions] == [("Runner::encode", "method", 8), ("at::native::after", "function", 13)]
    assert [(c.callee, c.line, facts.definitions[c.definition].name) for c in facts.calls] == [("at::native::metal::neuron", 9, "Runner::encode")]


def test_only_objective_c_files_are_rewritten():
    assert objc.is_objc("aten/src/ATen/native/mps/operations/BinaryOps.mm", b"")
    assert objc.is_objc("aten/src/ATen/native/mps/OperationUtils.h", b"@interface X : NSObject\n@end\n")
    cpp = b"int a[sizeof x]; auto l = [this, &y] { return v[i] + w[j][k]; }; [[nodiscard]] int f();\n"
    assert not objc.is_objc("aten/src/ATen/native/Foo.cpp", cpp)
    # Even if asked, C++ brackets are left as they are.
    assert objc.rewrite(cpp) == cpp


@pytest.mark.parametrize("text, kept", [
    (b"auto f = [] GPU_LAMBDA(scalar_t a) -> scalar_t { return a; };", b"(scalar_t a) -> scalar_t"),
    (b"auto f = [=] __device__ (scalar_t a) -> scalar_t { return a; };", b"(scalar_t a) -> scalar_t"),
    (b"#ifndef GPU_LAMBDA\n#define GPU_LAMBDA __host__ __device__\n#endif\n", b"#ifndef GPU_LAMBDA\n#define GPU_LAMBDA "),
])
def test_attributes_before_a_lambdas_parameters_leave_the_parameters(text, kept):
    masked = masking.mask_attributes(text)
    assert kept in masked and len(masked) == len(text)
    assert problems(parse(masked)) == []


def test_stray_braces_qualify_a_definition_by_their_namespace_once(real_tree_root):
    """Read as C++ (no rewriting), an MPS file leaves many stray `}` after one
    namespace: each used to reopen it, so names came out as
    `at::native::at::native::...::structured_add_out_mps::impl`."""
    path = "aten/src/ATen/native/mps/operations/BinaryOps.mm"
    data = (real_tree_root / path).read_bytes()
    facts = extract.Extractor(OperatorNames(frozenset(), frozenset())).extract(path.replace(".mm", ".cpp"), data)
    assert facts.definitions
    for d in facts.definitions:
        parts = d.name.split("::")
        assert not any(parts[i : i + 2] == parts[i + 2 : i + 4] for i in range(len(parts) - 3)), d.name


@pytest.mark.slow
def test_every_mps_structured_kernel_is_indexed_by_its_name_at_its_line(real_index, real_tree):
    """Ground truth from the files: each `TORCH_IMPL_FUNC(x)` of an .mm file
    is `at::native::structured_x::impl` at the line that holds the macro."""
    root = real_tree.root
    macro = re.compile(rb"^TORCH_IMPL_FUNC\((\w+)\)", re.M)
    expected = []
    for path in sorted((root / "aten/src/ATen/native/mps").rglob("*.mm")):
        data = path.read_bytes()
        for m in macro.finditer(data):
            expected.append((path.relative_to(root).as_posix(), data.count(b"\n", 0, m.start()) + 1, m.group(1).decode()))
    assert len(expected) > 50
    missing = []
    for rel, line, name in expected:
        found = [d for d in real_index.definitions_in(rel) if d.location.line == line]
        if [d.name for d in found] != [f"at::native::structured_{name}::impl"]:
            missing.append((rel, line, name, [d.name for d in found]))
    assert missing == []
    for rel, line, name in expected[:5]:
        assert f"TORCH_IMPL_FUNC({name})" in line_of(root, rel, line)


@pytest.mark.slow
def test_no_objective_c_file_qualifies_a_name_twice(real_index, real_tree):
    paths = [p.relative_to(real_tree.root).as_posix() for p in (real_tree.root / "aten/src/ATen").rglob("*.mm")]
    assert len(paths) > 80
    names = [d.name for p in paths for d in real_index.definitions_in(p)]
    assert len(names) > 1000
    assert [n for n in names if re.search(r"\b(\w+::\w+)::\1::", n)] == []


def test_a_return_type_after_an_attribute_macro_stays_out_of_the_name(real_tree_root):
    """`C10_ERASE static c10::DynamicTypePtr createNamed(...)` (type_factory.h)
    was indexed as `c10::TypeFactoryBase::c10::DynamicTypePtrcreateNamed`."""
    path = "aten/src/ATen/core/type_factory.h"
    data = (real_tree_root / path).read_bytes()
    assert b"C10_ERASE static" in data
    facts = extract.Extractor(OperatorNames(frozenset(), frozenset())).extract(path, data)
    lines = data.split(b"\n")
    assert facts.definitions
    for d in facts.definitions:
        assert re.search(rb"\b" + d.short.encode() + rb"\b", lines[d.line - 1]), d
        assert "Ptr" not in d.short, d


@pytest.mark.parametrize("text", [
    b"int a[(int) i];\n",  # a subscript after a cast
    b"for (int in = 0; in < 3; ++in) {}\nfor (const auto& in : xs) {}\n",  # `in` as a name
    b"size_t h = seed ^ std::hash<T>{}(v);\n",  # an exclusive or before a braced temporary
])
def test_cpp_in_an_objective_c_file_is_left_as_it_is(text):
    assert objc.rewrite(text) == text


@pytest.mark.parametrize("text, names", [
    (b"- (void)\nfoo {\n}\n", []),  # no room on the name's line: no name, and the newline stays
    (b"- (id)foo {\n}\n", ["foo"]),
    (b"- (float* _Nullable)biasTerms {\n}\n", ["biasTerms"]),
    (b"- (void)run:(void (^)(int))done {\n  go(done);\n}\n", ["run"]),  # a block type in a method head
    (b"x = a ^\n  T{1};\n", []),  # not a block: no `[]` written over the newline
    (b"@protocol P;\nvoid f() { g(); }\n@interface X\n@end\n", ["f"]),  # a forward declaration ends at its `;`
])
def test_method_heads_blocks_and_declarations_keep_the_files_shape(text, names):
    rewritten = objc.rewrite(text)
    assert len(rewritten) == len(text)
    assert [i for i, b in enumerate(rewritten) if b == 10] == [i for i, b in enumerate(text) if b == 10]
    facts = extract.Extractor(OperatorNames(frozenset(), frozenset())).extract("aten/src/ATen/native/metal/X.mm", text)
    assert [d.name for d in facts.definitions] == names
    for d in facts.definitions:
        assert d.short.encode() in text.split(b"\n")[d.line - 1]
