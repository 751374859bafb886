; Scopes that qualify a definition's name, and the regions that condition a
; call: namespaces (named, nested `a::b`, anonymous), classes and structs with
; a body, switch cases and if branches, and lambdas bound to a local name
; (their body runs where the name is called: Note [named lambdas]).

(namespace_definition body: (declaration_list) @namespace.body) @namespace

(class_specifier name: (_) @class.name body: (field_declaration_list) @class.body)
(struct_specifier name: (_) @class.name body: (field_declaration_list) @class.body)
(union_specifier name: (_) @class.name body: (field_declaration_list) @class.body)

(case_statement) @case

; (The else branch is read in Python: an optional capture here cost more.)
(if_statement
  condition: (condition_clause) @if.condition
  consequence: (_) @if.then) @if

(declaration
  declarator: (init_declarator
    declarator: (identifier) @lambda.name
    value: (lambda_expression body: (compound_statement) @lambda.body)))
