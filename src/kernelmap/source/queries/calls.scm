; Every call expression; the callee's spelling decides its kind in Python. The
; call starts where its callee does, which stands for it: a capture of its own
; cost more, and so does asking a node for its parent.

(call_expression function: (_) @callee arguments: (argument_list))

; `gemm_internal<float>(CUDABLAS_GEMM_ARGS(float));` as a statement reads to
; the grammar as a declaration of a parenthesised name of a template type: a call.
(declaration type: (template_type) @callee declarator: (parenthesized_declarator)) @call
(declaration type: (qualified_identifier name: (template_type)) @callee declarator: (parenthesized_declarator)) @call
