"""Stage 2, parsing: the text prefilter that skips files no rule can fire on, the guard against inputs whose
LibCST parse would take minutes, LibCST's parse itself (`cst_parse`) and Python's (`python_ast`, shared by
the cheap steps), the byte-exact round trip of what LibCST drops, the collector's pause while a file is
parsed, and node positions.

May import: `amp_lint.files`, `amp_lint.diagnostics`.
"""
