"""Stage 5, conversion: planning the rewrite of a plain fp32 training loop into the AMP pattern (the
AMP100 fix), expressed as fixes.

May import: `amp_lint.fixes`, `amp_lint.analysis`, `amp_lint.parse`, `amp_lint.files`, `amp_lint.diagnostics`.
"""
