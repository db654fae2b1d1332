"""Stage 6, rules: the rule API (`base`) and the registry, every rule class in code order. Adding a rule is
one file and one line here. A rule is a predicate over the analysis model; it builds fixes with
`amp_lint.fixes.builder` and never walks the tree itself.

May import: `amp_lint.conversion`, `amp_lint.fixes`, `amp_lint.analysis`, `amp_lint.parse`, `amp_lint.files`,
`amp_lint.diagnostics`.
"""

from __future__ import annotations

from typing import Dict, List, Type

from amp_lint.rules.base import Rule

from amp_lint.rules.amp001_backward_in_autocast import BackwardInAutocast
from amp_lint.rules.amp003_compile_backward_autocast import CompileBackwardAutocast
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
from amp_lint.rules.amp025_closure_to_scaler_step import ClosureToScalerStep
from amp_lint.rules.amp031_clip_error_if_nonfinite import ClipErrorIfNonfinite
from amp_lint.rules.amp032_gradient_penalty_scaling import GradientPenaltyScaling
from amp_lint.rules.amp033_scaled_loss_logged import ScaledLossLogged
from amp_lint.rules.amp054_autocast_silently_disabled import AutocastSilentlyDisabled
from amp_lint.rules.amp074_deprecated_autocast_state import DeprecatedAutocastState
from amp_lint.rules.amp075_autocast_device_type import AutocastDeviceType
from amp_lint.rules.amp076_invalid_scaler_factors import InvalidScalerFactors
from amp_lint.rules.amp077_apex_amp import ApexAmp
from amp_lint.rules.amp078_cuda_implicit_autocast_state import CudaImplicitAutocastState
from amp_lint.rules.amp079_legacy_private_amp_name import LegacyPrivateAmpName
from amp_lint.rules.amp012_scaler_with_bf16 import ScalerWithBf16
from amp_lint.rules.amp013_scaler_in_loop import ScalerBuiltInLoop
from amp_lint.rules.amp014_scaler_device_mismatch import ScalerDeviceMismatch
from amp_lint.rules.amp052_bce_in_autocast import BceInAutocast
from amp_lint.rules.amp053_nested_disabled_autocast import NestedDisabledAutocast
from amp_lint.rules.amp061_custom_fwd_bwd_unpaired import CustomFwdBwdUnpaired
from amp_lint.rules.amp062_custom_fwd_without_device_type import CustomFwdWithoutDeviceType
from amp_lint.rules.amp090_data_parallel_autocast_dtype import DataParallelAutocastDtype
from amp_lint.rules.amp091_fsdp_plain_grad_scaler import FsdpPlainGradScaler
from amp_lint.rules.amp092_deepspeed_manual_amp import DeepSpeedManualAmp
from amp_lint.rules.amp093_accelerate_manual_amp import AccelerateManualAmp
from amp_lint.rules.amp094_fsdp2_fp16_without_scaler import Fsdp2Fp16WithoutScaler
from amp_lint.rules.amp024_unscale_twice import UnscaleTwice
from amp_lint.rules.amp040_step_every_microbatch import StepEveryMicrobatch
from amp_lint.rules.amp041_unscale_outside_boundary import UnscaleOutsideBoundary
from amp_lint.rules.amp043_zero_grad_before_step import ZeroGradBeforeStep
from amp_lint.rules.amp002_loss_outside_autocast import LossOutsideAutocast
from amp_lint.rules.amp042_accumulated_loss_not_divided import AccumulatedLossNotDivided
from amp_lint.rules.amp050_fp16_params_with_scaler import Fp16ParamsWithScaler
from amp_lint.rules.amp057_half_model_with_autocast import HalfModelWithAutocast
from amp_lint.rules.amp055_graphed_callables_autocast_cache import GraphedCallablesAutocastCache
from amp_lint.rules.amp056_autocast_applied_to_tensor import AutocastAppliedToTensor
from amp_lint.rules.amp051_manual_cast_in_autocast import ManualCastInAutocast
from amp_lint.rules.amp060_custom_function_without_custom_fwd import CustomFunctionWithoutCustomFwd
from amp_lint.rules.amp080_scaler_state_not_checkpointed import ScalerStateNotCheckpointed
from amp_lint.rules.amp081_scaler_state_mid_iteration import ScalerStateMidIteration
from amp_lint.rules.amp100_fp32_training_loop import Fp32TrainingLoop
from amp_lint.rules.amp900_unused_noqa import UnusedNoqa

ALL_RULES: List[Type[Rule]] = [
    BackwardInAutocast,
    CompileBackwardAutocast,
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
    ClosureToScalerStep,
    ClipErrorIfNonfinite,
    GradientPenaltyScaling,
    ScaledLossLogged,
    AutocastSilentlyDisabled,
    DeprecatedAutocastState,
    AutocastDeviceType,
    InvalidScalerFactors,
    ApexAmp,
    CudaImplicitAutocastState,
    LegacyPrivateAmpName,
    ScalerWithBf16,
    ScalerBuiltInLoop,
    ScalerDeviceMismatch,
    BceInAutocast,
    NestedDisabledAutocast,
    CustomFwdBwdUnpaired,
    CustomFwdWithoutDeviceType,
    DataParallelAutocastDtype,
    FsdpPlainGradScaler,
    DeepSpeedManualAmp,
    AccelerateManualAmp,
    Fsdp2Fp16WithoutScaler,
    UnscaleTwice,
    StepEveryMicrobatch,
    UnscaleOutsideBoundary,
    ZeroGradBeforeStep,
    LossOutsideAutocast,
    AccumulatedLossNotDivided,
    Fp16ParamsWithScaler,
    HalfModelWithAutocast,
    GraphedCallablesAutocastCache,
    AutocastAppliedToTensor,
    ManualCastInAutocast,
    CustomFunctionWithoutCustomFwd,
    ScalerStateNotCheckpointed,
    ScalerStateMidIteration,
    Fp32TrainingLoop,
    UnusedNoqa,
]

ALL_RULES.sort(key=lambda rule: rule.code)
RULES_BY_CODE: Dict[str, Type[Rule]] = {rule.code: rule for rule in ALL_RULES}


def all_codes() -> List[str]:
    return [rule.code for rule in ALL_RULES]


def default_codes() -> List[str]:
    return [rule.code for rule in ALL_RULES if rule.default_enabled]


def rule_by_code(code: str) -> Type[Rule]:
    return RULES_BY_CODE[code.upper()]
