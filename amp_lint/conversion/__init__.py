"""Stage 5, conversion: planning the rewrite of a plain fp32 training loop into the AMP pattern (the
AMP100 fix), expressed as fixes.

The steps, one module each, in the order the planner runs them:

- `training_steps`: find the fp32 iterations to convert (backwards, optimizer steps, the loop or step function);
- `already_mixed`: stay silent on code that already trains in mixed or low precision (apex, DeepSpeed, bf16
  models, autocast in a helper, unit tests that take one step);
- `refusals`: what makes a conversion unsafe, with a reason that says what the code does;
- `devices`: the device expression the converted code uses, following the script's own choice;
- `scaler_placement`: where the one GradScaler of a run is created and how it reaches the step;
- `edits`: the edits themselves (autocast around the forward slice, scaled backward, `unscale_`, `update`);
- `planner`: the entry point, `plan_conversions`, which ties the steps together.

`syntax`, `file_context` and `call_sites` are what the steps share: the tree's shape, the file's names and
networks, where a function is called.

May import: `amp_lint.fixes`, `amp_lint.analysis`, `amp_lint.parse`, `amp_lint.files`, `amp_lint.diagnostics`.
"""
