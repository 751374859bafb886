; Macros defined by a `#define` with a body (read in Python: those inside a
; function's body that it uses, and those at file scope whose body launches
; a kernel, for the functions that use them: Note [calls in function-local
; macros]).

(preproc_function_def value: (preproc_arg) @macro.body)
(preproc_def value: (preproc_arg) @macro.body)
