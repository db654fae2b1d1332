# origin: mosaicml/llm-foundry | https://github.com/mosaicml/llm-foundry/pull/302 | -
# principle: 1
# expect: AMP075 line 15
# summary: a torch.device('cuda:0') object is passed to autocast as its device type; autocast needs the string `device.type` ('cuda').
# upstream-fix: PR #302 passes torch.device(...).type.
# fix-check: autocast\(device\.type
import torch


def generate_samples(model, tokenizer, prompts, device_id):
    device = torch.device(f"cuda:{device_id}")
    model.to(device)
    outputs = []
    with torch.no_grad():
        with torch.autocast(device, dtype=torch.bfloat16):
            for prompt in prompts:
                encoded = tokenizer(prompt, return_tensors="pt").to(device)
                outputs.append(model.generate(**encoded, max_new_tokens=64))
    return outputs
