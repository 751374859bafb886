"""The include reader on tiny files: each directive's #if conditions as the
preprocessor nests them, include guards, directives hidden in comments and
raw strings, continued lines, computed includes, and argument-less #defines."""

from __future__ import annotations

from kernelmap.source.includes import ANGLED, COMPUTED, QUOTED, Define, Include, read


def includes(text: str) -> list[Include]:
    return list(read(text.encode())[0])


def defines(text: str) -> list[Define]:
    return list(read(text.encode())[1])


def test_plain_includes_with_their_lines_and_brackets():
    found = includes('#include <ATen/Tensor.h>\n\n  #  include "local.h" // why\n#include_next <x.h>\n')
    assert found == [Include(1, "ATen/Tensor.h", ANGLED, None), Include(3, "local.h", QUOTED, None), Include(4, "x.h", ANGLED, None)]


def test_if_elif_else_nesting():
    text = """#if A
#include <a.h>
#elif defined(B) || C
#include <b.h>
#else
#ifdef D
#include <d.h>
#endif
#include <e.h>
#endif
#ifndef F
#include <f.h>
#endif
"""
    got = {i.name: i.condition for i in includes(text)}
    assert got == {
        "a.h": "A",
        "b.h": "!A && (defined(B) || C)",
        "d.h": "(!A && !(defined(B) || C)) && defined(D)",
        "e.h": "!A && !(defined(B) || C)",
        "f.h": "!defined(F)",
    }


def test_negating_a_negation_gives_the_condition_back():
    text = "#if !(defined(X) || Y)\n#include <a.h>\n#else\n#include <b.h>\n#endif\n#if !defined(Z)\n#else\n#include <c.h>\n#endif\n"
    got = {i.name: i.condition for i in includes(text)}
    assert got == {"a.h": "!(defined(X) || Y)", "b.h": "defined(X) || Y", "c.h": "defined(Z)"}


def test_an_include_guard_is_no_condition_but_an_ifndef_in_the_middle_is():
    guarded = "// c\n#ifndef FOO_H\n#define FOO_H\n#include <a.h>\n#ifndef BAR\n#include <b.h>\n#endif\n#endif // FOO_H\n"
    assert [(i.name, i.condition) for i in includes(guarded)] == [("a.h", None), ("b.h", "!defined(BAR)")]
    # not a guard: the #endif is not the last directive
    not_guard = "#ifndef FOO_H\n#define FOO_H\n#include <a.h>\n#endif\n#include <b.h>\n"
    assert [(i.name, i.condition) for i in includes(not_guard)] == [("a.h", "!defined(FOO_H)"), ("b.h", None)]
    # the guard's own macro is not a definition worth keeping
    assert [d.name for d in defines(guarded)] == []


def test_directives_in_block_comments_and_raw_strings_are_not_directives():
    text = """/* an example:
#include <in_comment.h>
*/
const char* k = R"SRC(
#include <in_raw_string.h>
)SRC";
// a comment with /* that opens nothing
#include <real.h>
const char* s = "/* not a comment";
#include <also_real.h>
"""
    assert [i.name for i in includes(text)] == ["real.h", "also_real.h"]


def test_continued_lines_and_comments_in_conditions():
    text = "#if defined(A) && \\\n    defined(B) /* both */\n#include <ab.h>\n#endif\n#include <after.h>\n"
    found = includes(text)
    assert found[0] == Include(3, "ab.h", ANGLED, "defined(A) && defined(B)")
    assert found[1].line == 5


def test_computed_includes_are_named_by_their_macro():
    assert includes("#include CUB_HEADER\n") == [Include(1, "CUB_HEADER", COMPUTED, None)]


def test_defines_without_parameters_and_undefs():
    text = "#define A 1\n#define B() true\n#define F(x) x\n#ifdef Q\n#define C\n#endif\n#undef A\n"
    assert defines(text) == [Define(1, "A", "1", None), Define(2, "B", "true", None), Define(5, "C", "", "defined(Q)"), Define(7, "A", None, None)]


def test_a_hash_inside_a_line_is_no_directive():
    assert includes('auto s = "#include <no.h>";\nint x; #include <no2.h>\n') == []
