; Function and method definitions (free functions, methods in class bodies,
; out-of-line `Class::method`, templates, TORCH_IMPL_FUNC / TORCH_META_FUNC
; structured kernels, and TORCH_LIBRARY blocks, told apart in Python by the
; declarator's macro name).

(function_definition declarator: (_) @declarator body: (compound_statement)) @definition
