# origin: teamtomo/membrain-seg | https://github.com/teamtomo/membrain-seg/issues/120 | src/membrain_seg/segmentation/segment.py
# also: fixed by https://github.com/teamtomo/membrain-seg/pull/121 (as stated in the issue)
# principle: 6
# expect: AMP070 line 12
# summary: sliding-window inference runs inside torch.cuda.amp.autocast(), which warns "torch.cuda.amp.autocast(args...) is deprecated".
import torch


def segment(tomogram, pl_model, sliding_window_inferer):
    pl_model.eval()
    with torch.no_grad():
        with torch.cuda.amp.autocast():
            predictions = sliding_window_inferer(tomogram, pl_model)
    return predictions
