"""``amp-lint verify``: check that an fp32 -> AMP conversion of a training script still trains alike.

Each script runs on both sides in child processes, several seeds each: as written (fp32) and as converted (amp-lint's
conversion, or the user's own AMP version), with the same seeds on both sides; the loss curves are compared
pairwise (seed i's AMP run against seed i's fp32 run), and speed and memory compared. Every AMP run runs under the
runtime guard (:mod:`amp_lint.guard`), whose breaches explain a failure. The steps, one module each: :mod:`~amp_lint.verify.runner` runs the sides,
:mod:`~amp_lint.verify.judging` gives the verdict, :mod:`~amp_lint.verify.reporting` writes the CSV, the plot and
the text report, :mod:`~amp_lint.verify.results` holds the verdicts and result classes. The children run under
:mod:`amp_lint.verify.bootstrap`, which records every training step without editing the script. Importing this
package does not import torch: only the children do.

Stage 9. May import: `amp_lint.engine` (to convert) and every stage below it.
"""

from amp_lint.verify.bootstrap import RunRecord
from amp_lint.verify.runner import (
    BUNDLED_SCRIPTS,
    EQUIVALENT,
    EXIT_CODES,
    INCONCLUSIVE,
    NOT_EQUIVALENT,
    NOT_RUN,
    Judgement,
    ScriptResult,
    VerifyError,
    VerifyReport,
    collect_scripts,
    format_text,
    judge,
    local_imports,
    verify_scripts,
    write_result_files,
)

__all__ = [
    "BUNDLED_SCRIPTS",
    "EQUIVALENT",
    "EXIT_CODES",
    "INCONCLUSIVE",
    "NOT_EQUIVALENT",
    "NOT_RUN",
    "Judgement",
    "RunRecord",
    "ScriptResult",
    "VerifyError",
    "VerifyReport",
    "collect_scripts",
    "format_text",
    "judge",
    "local_imports",
    "verify_scripts",
    "write_result_files",
]
