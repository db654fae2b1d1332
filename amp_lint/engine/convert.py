"""Convert fp32 training code to AMP in one call: the AMP100 fix, as a library function.

`amp-lint verify` uses this on its scripts; it is the same as
`amp-lint --select AMP100 --fix --unsafe-fixes [--amp-dtype ...] [--amp-device ...]` on one text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from amp_lint.engine.checker import Checker

CODE = "AMP100"


@dataclass
class ConversionResult:
    code: str
    """The converted source (the input itself when nothing was converted)."""
    converted: bool
    """True when at least one training loop was rewritten."""
    reasons: List[str] = field(default_factory=list)
    """Why loops were left alone: one message per refused loop (empty when everything converted)."""


def convert_source(source: str, *, amp_dtype: str = "float16", amp_device: Optional[str] = None) -> ConversionResult:
    """Rewrite the plain fp32 training loops of `source` into the canonical AMP pattern.

    `amp_dtype` is "float16" (autocast + GradScaler) or "bfloat16" (autocast only); `amp_device` is the
    device type to emit ("cuda", "cpu", ...), or None to follow the script's own device expression (a
    `torch.device` variable, `torch.accelerator.current_accelerator()` with a fallback, becomes `device.type`;
    a string variable `torch.device(device).type`; a literal from the file's transfers, else "cuda"), which is
    what `amp-lint --fix` writes. Code that already trains in mixed or low precision converts nothing and gives
    no reason (AMP100 is silent there): `reasons` then holds the generic "no fp32 training loop found".
    """
    if amp_dtype not in ("float16", "bfloat16"):
        raise ValueError(f"unsupported AMP dtype {amp_dtype!r}: use float16 or bfloat16")
    checker = Checker(
        frozenset({CODE}),
        fix=True,
        unsafe_fixes=True,
        rule_options={"amp_dtype": amp_dtype, "amp_device": amp_device},
    )
    result = checker.check(source, "<source>")
    code = result.fixed_source if result.fixed_source is not None else source
    reasons = [d.message for d in result.diagnostics if d.code == CODE]
    reasons += [error.message for error in result.errors]
    converted = result.fixed.get(CODE, 0) > 0 and code != source
    if not converted and not reasons:
        reasons.append("no fp32 training loop found (a loop with `loss.backward()` and `optimizer.step()`)")
    return ConversionResult(code=code, converted=converted, reasons=reasons)
