; Stubs and their registrations, and dtype dispatch sites, written as macro
; calls at namespace or function scope.

((call_expression
   function: (identifier) @macro
   arguments: (argument_list) @arguments) @site
 (#match? @macro "^(DECLARE_DISPATCH|DEFINE_DISPATCH|(ALSO_)?REGISTER_[A-Z0-9_]*DISPATCH|AT_DISPATCH_[A-Z0-9_]+)$"))

; `m.impl("op", kernel)` / `m.def("schema")` inside TORCH_LIBRARY* blocks.
((call_expression
   function: (field_expression
     argument: (identifier) @library.object
     field: (field_identifier) @library.method)
   arguments: (argument_list . (_) @library.op)) @library.call
 (#match? @library.method "^(impl|def)$"))
