"""Stage 3, analysis: what the parsed file means for AMP, built once per file and read by every rule.

The modules, in layers: each imports only from its own layer and the ones before it, with no circle
(`tests/test_analysis_layout.py` holds the list and checks it). What a lower layer needs from a higher one
comes down as data or through a hook (`project_hooks`), never by an import back up.

1. Per-function facts: pure readers of one function's code and the names it reads
- `names`: which names mean `torch.autocast`, `GradScaler`, optimizers, clipping (`NameTable`), resolved
  once per scope; `dotted_name`.
- `syntax`: small readers of LibCST nodes (`code_of`, literals, call arguments) and the statement and
  loop types the model records; `walk`: the lean tree walk (`Walker`) the builder subclasses.
- `autocast`: what an autocast expression asks for (`AutocastSpec`: device, dtype, enabled; `DType`).
- `events`: one function's facts: `Scope`, `Event` (one training-step operation and where it sits),
  `EventKind`, `Branch`, `AutocastRegion`, `enabled_region`.
- `function_summary`: what a function does to the protocol, applied at its call (`Summary`,
  `argument_names`, `call_params`).
- `single_pass_loops`: loops that do not repeat an iteration (retry loops, loops over optimizers);
  `leaving_branches`: branches left by a jump; `scaler_scan`: does a function drive a scaler;
  `linear_grads`: gradient uses that keep the scale.
- `cfg`: a control-flow graph per function and module body; `conditions`: branch tests normalised into
  atoms, so that tests deciding the same thing agree; `paths`: "is there a feasible path from A to B
  avoiding C", answered as no, proved or assumed.
- `values`: what device strings, dtypes and flags can be (`values.of(module).resolve(expr, scope_node)`);
  `value_types`: `Value`, `Atom`, `Kind`, `Index`; `def_use`: the def-use index the resolution reads;
  `dict_splats`: what a `**kwargs` splat passes.

2. The file model (`build_model(module) -> FileModel`), assembled from them
- `builder`: the tree walk (`ModelBuilder`): scopes, statements, branches, loops; `build_model`. Its
  hooks: `calls` (`CallRecorder`: call sites, training-step events, deprecated uses; method calls
  classified once every binding is known), `backward_calls` (which loss a backward runs on, which scaler
  scaled it), `assignments` (scalers, optimizers, autocast bindings), `autocast_regions` (autocast `with`
  items and decorators; `resolve_spec`).
- `file_model`: `FileModel`, `TrainingStep`, `CallSite`, `AssignmentSite`, `ScalerBinding`,
  `DeprecatedUse`; `is_scaler` / `is_optimizer`.
- `steps`: events grouped into iterations (`training_steps`), helpers' events inlined at their calls.
- `project_hooks`: what the model may ask of other modules of the project (`project()`, `SUMMARIES`,
  `FOLLOWED_CALLS`), answered by the project layer's provider while a file is checked.

3. Project summaries: callers and callees across files
- `project`: the index of the checked tree's modules; `summaries`: `ProjectSummaries`, the provider of
  other modules' function summaries (through `project_hooks`), with `caller_search` (AMP013's callers),
  `instance_calls`, `attribute_classes`, `callers`, `foreign_modules` (a module read on the file's behalf).
- `project_factories`: project functions returning an autocast or a GradScaler; `scaler_classes`: project
  classes a scaler name may hold; `scaler_reach`, `package_files`: where a scaler attribute can go.
- `gradient_effects`: what a project function does to the gradients (`effects_of(model, scope) ->
  GradientEffects`: reads, clips, zeroes, backward, steps, scaler methods, unknown), transitive through
  the calls that resolve (same class, held objects, attributes bound to functions, literal getattr, other
  modules); `calls_reading_gradients(model, step)`; `optimizer_holds_parameters_of`; `class_builds_scaler`.

4. The protocol run over the paths of an iteration
- `scaler_flow`: the paths of one iteration (`flow_of(model, step)`).
- `protocol`: the GradScaler protocol written once, as data: per optimizer the scaler's stage
  (ready/unscaled/stepped), the gradients' scale (scaled, unscaled, unscaled twice, zeroed; accumulating
  or not), per scaler the inf checks; the violations each transition names and the rule that reports
  it. No LibCST: a runtime guard or the fix check can run the same table.
- `typestate`: the engine that runs the table over an iteration's paths (`typestate.run(flow)`): the
  states before each event, the violations at it (with their cause), the states at the iteration's end.
- `flow_queries`: path questions beyond the protocol's own; `accumulation`: the gradient-accumulation
  boundary of an iteration (a loop body or a per-call step function) and which events run on every
  micro-batch; `epochs`: epochs are iterations too: does a call or construction run on several epochs.

5. Rule predicates
- `order`: what an order rule asks, answered once: `Breach` (a condition, the event where it holds, the
  events it rests on, proved or assumed). The queries, by subject: `order_updates` (update() twice,
  before the inf checks, never: AMP021-023), `order_unscale` (unscale_ twice, after the step, left for
  the next iteration or call: AMP024), `order_steps` (a direct optimizer step: AMP020), `order_reads`
  (scaled gradients read: AMP030), `order_accumulation` (what runs on every micro-batch: AMP040-042),
  `order_gradients` (zero_grad before the step, a closure to `scaler.step`, the scaler saved
  mid-iteration: AMP043, AMP025, AMP081). A rule turns breaches into messages and fixes.
- `tensor_evidence`: is a name a tensor, by the evidence the code gives (the device rules).

How a rule reads the analysis
A rule's `check(model)` gets the `FileModel` and never walks the tree. It iterates what it is about:
`model.steps` (each `TrainingStep` with its events in order; `step.of(EventKind.SCALER_UPDATE)`),
`model.call_sites` (every call, with `qualified_name` and `in_enabled_autocast()`), `model.regions`,
`model.scalers`, `model.deprecated_uses`. It asks about paths through `scaler_flow.flow_of(model,
step)`: `flow.path(first, second, avoid)` returns None (no such path) or a `Proof` (PROVED, or ASSUMED
with the condition it rests on, which `assumption_text` turns into the finding's `assumption`). It asks
about values through `values.of(model.module).resolve(expression, scope.node, model.parents)` (the
rules' shortcut: `rules._helpers.value_of(model, expression, scope)`). Example
(AMP022): for each `update` event of a step, the `step`/`unscale_` events of the same scaler; if
`flow.from_start(update, avoid=checks)` is a path, the update can run before any inf check.
An event with `in_helper` came through a call (`trail()` lists the calls): fixes leave it alone.

May import: `amp_lint.parse`, `amp_lint.files`, `amp_lint.diagnostics`.
"""
