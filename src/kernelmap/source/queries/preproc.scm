; Preprocessor conditionals: each gives a body region under its condition and
; an alternative (#else / #elif) under the negated condition.

(preproc_if condition: (_) @condition) @if
(preproc_elif condition: (_) @condition) @if
(preproc_ifdef name: (_) @name) @ifdef
