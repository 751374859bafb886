; Regions the grammar could not parse.
(ERROR) @error
