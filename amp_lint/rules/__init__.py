"""The rule registry: every rule class, in code order. Adding a rule is one file and one line here."""

from __future__ import annotations

from typing import Dict, List, Type

from amp_lint.rules.base import Rule

from amp_lint.rules.amp001_backward_in_autocast import BackwardInAutocast
from amp_lint.rules.amp010_fp16_without_scaler import Fp16WithoutScaler
from amp_lint.rules.amp011_unscaled_backward import UnscaledBackward
from amp_lint.rules.amp020_optimizer_step_on_scaled_grads import OptimizerStepOnScaledGrads
from amp_lint.rules.amp021_missing_update import MissingScalerUpdate
from amp_lint.rules.amp022_update_before_step import UpdateBeforeStep
from amp_lint.rules.amp023_update_twice import UpdateTwice
from amp_lint.rules.amp030_clip_without_unscale import ClipWithoutUnscale
from amp_lint.rules.amp07x_deprecated_spelling import (
    DeprecatedCpuAutocast,
    DeprecatedCudaAutocast,
    DeprecatedCustomFwdBwd,
    DeprecatedGradScaler,
)

ALL_RULES: List[Type[Rule]] = [
    BackwardInAutocast,
    Fp16WithoutScaler,
    UnscaledBackward,
    OptimizerStepOnScaledGrads,
    MissingScalerUpdate,
    UpdateBeforeStep,
    UpdateTwice,
    ClipWithoutUnscale,
    DeprecatedCudaAutocast,
    DeprecatedCpuAutocast,
    DeprecatedGradScaler,
    DeprecatedCustomFwdBwd,
]

ALL_RULES.sort(key=lambda rule: rule.code)
RULES_BY_CODE: Dict[str, Type[Rule]] = {rule.code: rule for rule in ALL_RULES}


def all_codes() -> List[str]:
    return [rule.code for rule in ALL_RULES]


def default_codes() -> List[str]:
    return [rule.code for rule in ALL_RULES if rule.default_enabled]


def rule_by_code(code: str) -> Type[Rule]:
    return RULES_BY_CODE[code.upper()]
