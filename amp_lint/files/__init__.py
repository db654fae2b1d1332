"""Stage 1, files and configuration: finding the files to check, reading and writing them, the settings
that apply to each (pyproject.toml / amp-lint.toml), notebooks, the result cache and baselines.

May import: `amp_lint.diagnostics` only.
"""
