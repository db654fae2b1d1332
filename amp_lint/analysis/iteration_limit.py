"""The bound on one training iteration's order analysis (issue 45, items 7 and 8).

The order queries (`order_*`) ask pairwise questions about the events of one iteration (can this update
run before that step, and on which paths; is that step on the same micro-batch as this backward), each a
pass over the iteration's flow graph, and the protocol engine keeps the states that reach each event, each
state as large as the optimizers it follows: time and memory grow with the square of the events of one
iteration (1,000 `scaler.step(o_i)` calls in one loop took 44 s and 158 MB, 2,000 took 239 s and 533 MB).
The size guards (`files.sources`: bytes; `parse.guard`: tokens, chains, nesting) foresee what grows with
the text; this grows with how the text is arranged, which they cannot see.

Real training iterations hold a few dozen events, rarely a couple of hundred (see `MAX_ITERATION_EVENTS`).
An iteration with more is generated code or a stress test: the order queries skip it (`analysed_steps`),
and the checker reports the file as not fully analysed (`engine.partial_analysis`). Skipping only removes
that iteration's order findings; it never adds one.
"""

from __future__ import annotations

import weakref
from typing import List, Tuple

from amp_lint.analysis.file_model import FileModel, TrainingStep

# The most events (`TrainingStep.events`: backward, scaler and optimizer calls, clips, gradient reads,
# zero_grad, calls of this file's helpers, and the events of the helpers it calls) one iteration may hold for
# the order queries to ask about it. The largest iteration found in the real-world and injection corpora
# holds 179 (simpletransformers' `RetrievalModel.train`: 169 calls, 157 of them inside its helpers, and 10
# protocol calls); 500 `scaler.step` calls in one loop take about 2 s to analyse on a busy 2-CPU machine.
MAX_ITERATION_EVENTS = 500

_SPLIT: "weakref.WeakKeyDictionary[FileModel, Tuple[List[TrainingStep], List[TrainingStep]]]" = weakref.WeakKeyDictionary()


def _split(model: FileModel) -> Tuple[List[TrainingStep], List[TrainingStep]]:
    split = _SPLIT.get(model)
    if split is None:
        kept = [step for step in model.steps if len(step.events) <= MAX_ITERATION_EVENTS]
        skipped = [step for step in model.steps if len(step.events) > MAX_ITERATION_EVENTS]
        split = _SPLIT[model] = (kept, skipped)
    return split


def analysed_steps(model: FileModel) -> List[TrainingStep]:
    """The training steps the order queries ask about: those of at most `MAX_ITERATION_EVENTS` events."""
    return _split(model)[0]


def skipped_steps(model: FileModel) -> List[TrainingStep]:
    """The training steps too large for the order queries, in the model's order."""
    return _split(model)[1]


def skipped_description(step: TrainingStep) -> str:
    """What a note says about a skipped step: `16,004 events in one training iteration (the limit is 500)`."""
    return f"{len(step.events):,} events in one training iteration (the limit is {MAX_ITERATION_EVENTS:,})"
