; Every call expression; the callee's spelling decides its kind in Python.

(call_expression function: (_) @callee arguments: (argument_list)) @call
