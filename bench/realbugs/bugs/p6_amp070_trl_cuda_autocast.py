# origin: huggingface/trl | https://github.com/huggingface/trl/pull/1921 | -
# principle: 6
# expect: AMP070 line 17
# summary: a trainer computes reference log-probabilities under torch.cuda.amp.autocast(), a deprecated spelling.
# upstream-fix: PR #1921 (open) switches to torch.amp.autocast("cuda").
# fix-check: amp\.autocast\([\"']cuda[\"']
import torch


class DPOTrainer:
    def __init__(self, model, ref_model, precompute_ref_log_probs=True):
        self.model = model
        self.ref_model = ref_model
        self.precompute_ref_log_probs = precompute_ref_log_probs

    def compute_reference_log_probs(self, batch):
        with torch.no_grad(), torch.cuda.amp.autocast():
            return self.ref_model(**batch).logits.log_softmax(-1)
