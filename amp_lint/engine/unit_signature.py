"""What of a unit's text the verification of a document's groups depends on (`engine.units`, its *signature*).

`UnitChecker.check` verifies, once per signature, that the union of the groups' findings is the whole core's:
a rule may ask a question of the whole file ("a GradScaler anywhere?"), and only a line that holds a name the
rules look for (`UnitFacts.relevant_lines`) can change its answer. What a rule reads of such a line is its code
and its suppression comments (`# noqa`, `# amp-lint: ...`, which AMP900 reads too); any other comment is read by
no rule (the rules see the tree, and comments only where a fix keeps them, in the text each group's check
reads anyway). So a line's signature is its text without such a comment: typing a comment after
`scaler.step(optimizer)`, the line users edit, keeps the verified grouping and checks only the edited unit's
group (issue 43). The comments are found by Python's tokenizer over the unit's whole text (a `#` inside a
string is no comment); a unit it cannot read keeps its lines whole.
"""

from __future__ import annotations

import io
import re
import tokenize
from typing import Sequence, Tuple

# A comment that suppresses or configures (read by the engine and AMP900): kept, whatever else it says.
_KEPT_COMMENT = re.compile(r"noqa|amp-lint", re.IGNORECASE)


def signature_lines(lines: Sequence[str], relevant_lines: Tuple[str, ...]) -> Tuple[str, ...]:
    """The unit's `relevant_lines` (the lines of its text `lines` that hold a name the rules look for, in order),
    each without a comment other than a suppression comment (and the spaces before it)."""
    if not any("#" in line for line in relevant_lines):
        return relevant_lines  # no comment to leave out (the usual case: no tokenizer run)
    comments = {}  # 0-based row -> column where its (not kept) comment starts
    try:
        readline = io.StringIO("\n".join(lines) + "\n").readline
        for token in tokenize.generate_tokens(readline):
            if token.type == tokenize.COMMENT and not _KEPT_COMMENT.search(token.string):
                comments[token.start[0] - 1] = token.start[1]
    except (tokenize.TokenError, SyntaxError):  # (IndentationError is one)
        return relevant_lines
    relevant = set(relevant_lines)
    return tuple(line[: comments[row]].rstrip() if row in comments else line for row, line in enumerate(lines) if line in relevant)
