"""``amp-lint verify``: check that amp-lint's fp32 -> AMP conversion of a training script still trains.

Each script runs twice in child processes, as written and as converted, with the same seed; the runs' losses,
speed and memory are compared (see :mod:`amp_lint.verify.runner`). The children run under
:mod:`amp_lint.verify.bootstrap`, which records every training step without editing the script. Importing this
package does not import torch: only the children do.

Stage 9. May import: `amp_lint.engine` (to convert) and every stage below it.
"""

from amp_lint.verify.bootstrap import RunRecord
from amp_lint.verify.runner import (
    BUNDLED_SCRIPTS,
    CRASHED,
    EQUIVALENT,
    NOT_EQUIVALENT,
    REQUIRED_LOSS_DROP,
    ScriptResult,
    VerifyError,
    VerifyReport,
    collect_scripts,
    format_text,
    judge,
    verify_scripts,
    write_loss_plots,
)

__all__ = [
    "BUNDLED_SCRIPTS",
    "CRASHED",
    "EQUIVALENT",
    "NOT_EQUIVALENT",
    "REQUIRED_LOSS_DROP",
    "RunRecord",
    "ScriptResult",
    "VerifyError",
    "VerifyReport",
    "collect_scripts",
    "format_text",
    "judge",
    "verify_scripts",
    "write_loss_plots",
]
