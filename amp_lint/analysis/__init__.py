"""Stage 3, analysis: what the parsed file means for AMP. Names resolved once (which names are
`torch.autocast`, `GradScaler`, optimizers), and the model every rule reads.

May import: `amp_lint.parse`, `amp_lint.files`, `amp_lint.diagnostics`.
"""
