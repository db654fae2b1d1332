"""Stage 4, fixes: the types a fix is made of (`types`), the builder rules describe fixes with (`builder`),
applying them to the tree (`apply`), turning them into text edits for JSON/SARIF (`text_edits`) and
writing `# noqa` comments (`noqa`). Nothing here knows what a rule is.

May import: `amp_lint.analysis`, `amp_lint.parse`, `amp_lint.files`, `amp_lint.diagnostics`.
"""
