# origin: NVIDIA/apex | https://github.com/NVIDIA/apex/issues/2024 | apex/_autocast_utils.py
# also: https://github.com/NVIDIA/apex/pull/2025
# principle: 6
# expect: AMP079 line 20
# summary: the autocast interop helper calls the private torch.cuda.amp.autocast_mode._cast(args, dtype), kept only for compatibility.
# upstream-fix: PR #2025 calls torch.amp.autocast_mode._cast(args, "cuda", dtype).
# fix-check: torch\.amp\.autocast_mode\._cast\(args, [\"']cuda[\"']
import torch


def _get_autocast_dtypes():
    if torch.cuda.is_bf16_supported():
        return [torch.half, torch.bfloat16]
    return [torch.half]


def _cast_if_autocast_enabled(*args):
    if not torch.is_autocast_enabled():
        return args
    return torch.cuda.amp.autocast_mode._cast(args, torch.get_autocast_gpu_dtype())
