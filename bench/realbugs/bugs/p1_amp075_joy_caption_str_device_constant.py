# origin: StartHua/Comfyui_CXH_joy_caption | https://github.com/StartHua/Comfyui_CXH_joy_caption/pull/66 | Joy_caption_node.py
# also: issue #38 of the same repository (linked by the PR); https://github.com/Comfy-Org/ComfyUI/issues/6061 shows the same traceback
# principle: 1
# expect: AMP075 line 26
# summary: a module-level DEVICE set by the host's device helper becomes "cuda:0", and autocast receives str(DEVICE) as its device type.
# upstream-fix: PR #66 passes the device type ("cuda") instead of str(DEVICE).
# fix-check: autocast\((?!str\(DEVICE\))
import torch


def get_torch_device():
    if torch.cuda.is_available():
        return torch.device(torch.cuda.current_device())
    return torch.device("cpu")


DEVICE = get_torch_device()


class JoyCaption:
    def __init__(self, clip_model, image_adapter):
        self.clip_model = clip_model
        self.image_adapter = image_adapter

    def gen(self, pixel_values):
        with torch.amp.autocast_mode.autocast(str(DEVICE), enabled=True):
            vision_outputs = self.clip_model(pixel_values=pixel_values, output_hidden_states=True)
            image_features = vision_outputs.hidden_states[-2]
            embedded_images = self.image_adapter(image_features)
        return embedded_images.to(DEVICE)
