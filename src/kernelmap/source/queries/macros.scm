; Function-like macros defined by a `#define` (read in Python: only those
; inside a function's body count, Note [calls in function-local macros]).

(preproc_function_def value: (preproc_arg) @macro.body)
