"""Stage 7, the engine: one file through the pipeline (`checker`: parse, analyse, run the rules, apply
and check fixes), many files with the cache (`runner`) in worker processes (`workers`), and conversion as a library call
(`convert`).

May import: `amp_lint.rules` and every stage below it.
"""
