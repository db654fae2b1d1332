"""Stage 2, parsing: the text prefilter that skips files no rule can fire on, the guard against inputs whose
LibCST parse would take minutes, the byte-exact round trip of what LibCST drops, and node positions.

May import: `amp_lint.files`, `amp_lint.diagnostics`.
"""
