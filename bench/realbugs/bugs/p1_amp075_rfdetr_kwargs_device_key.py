# origin: roboflow/rf-detr | https://github.com/roboflow/rf-detr/issues/52 | -
# also: the issue points to https://github.com/roboflow/rf-detr/issues/50
# principle: 1
# expect: AMP075 line 16
# summary: autocast's arguments travel in a dict whose key is `device` where `device_type` is meant: "autocast.__init__() got an unexpected keyword argument 'device'".
import torch
from torch.amp import autocast


def get_autocast_args(args):
    return {"device": "cuda", "enabled": args.amp, "dtype": torch.bfloat16}


def predict(model, images, args):
    with torch.no_grad():
        with autocast(**get_autocast_args(args)):
            return model(images)
