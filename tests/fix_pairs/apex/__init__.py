"""A fake of NVIDIA apex for the AMP077 fix pair (tests/fix_pairs/amp077_apex_amp.py): apex is not
installed. Only `apex.amp`'s `initialize`, `scale_loss` and `master_params`, just enough to run the script,
and apex's `DeprecatedFeatureWarning` (a FutureWarning)."""


class DeprecatedFeatureWarning(FutureWarning):
    pass
