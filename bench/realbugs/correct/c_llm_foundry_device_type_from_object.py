# origin: mosaicml/llm-foundry | https://github.com/mosaicml/llm-foundry/pull/302 | -
# principle: 7
# expect: none
# tempts: AMP075
# summary: after the fix autocast receives torch.device(...).type ('cuda') rather than the device object with its index.
import torch


def generate_samples(model, tokenizer, prompts, device_id):
    device = torch.device(f"cuda:{device_id}")
    model.to(device)
    outputs = []
    with torch.no_grad():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            for prompt in prompts:
                encoded = tokenizer(prompt, return_tensors="pt").to(device)
                outputs.append(model.generate(**encoded, max_new_tokens=64))
    return outputs
