; Function and method definitions (free functions, methods in class bodies,
; out-of-line `Class::method`, templates, TORCH_IMPL_FUNC / TORCH_META_FUNC
; structured kernels, and TORCH_LIBRARY blocks, told apart in Python by the
; declarator's macro name).

(function_definition declarator: (_) @declarator body: (compound_statement)) @definition

; `void collapseDims() {};` reads to the grammar as a declaration of a function
; brace-initialised, which no variable can be: it is a definition with an empty body.
(declaration declarator: (init_declarator declarator: (function_declarator) @declarator value: (initializer_list))) @definition
