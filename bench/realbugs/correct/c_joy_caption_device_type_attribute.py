# origin: StartHua/Comfyui_CXH_joy_caption | https://github.com/StartHua/Comfyui_CXH_joy_caption/pull/66 | Joy_caption_node.py
# principle: 7
# expect: none
# tempts: AMP075
# summary: the fixed call passes the device type of the module-level DEVICE (which may carry an index such as cuda:0) to autocast.
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
        with torch.amp.autocast_mode.autocast(DEVICE.type, enabled=True):
            vision_outputs = self.clip_model(pixel_values=pixel_values, output_hidden_states=True)
            embedded_images = self.image_adapter(vision_outputs.hidden_states[-2])
        return embedded_images.to(DEVICE)
