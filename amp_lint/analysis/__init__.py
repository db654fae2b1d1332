"""Stage 3, analysis: what the parsed file means for AMP. Names resolved once (which names are
`torch.autocast`, `GradScaler`, optimizers), the model every rule reads, and the values of device
strings, dtypes and flags (`values`, resolved on demand).

May import: `amp_lint.parse`, `amp_lint.files`, `amp_lint.diagnostics`.
"""
