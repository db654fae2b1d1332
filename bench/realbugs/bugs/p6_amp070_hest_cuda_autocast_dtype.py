# origin: mahmoodlab/HEST | https://github.com/mahmoodlab/HEST/pull/124 | -
# principle: 6
# expect: AMP070 line 14
# summary: embedding extraction runs in torch.cuda.amp.autocast(dtype=precision), a deprecated spelling.
# upstream-fix: PR #124 uses torch.amp.autocast('cuda', ...).
# fix-check: amp\.autocast\([\"']cuda[\"']
import torch


@torch.inference_mode()
def embed_tiles(dataloader, model, precision=torch.float16):
    embeddings = []
    for batch in dataloader:
        with torch.cuda.amp.autocast(dtype=precision):
            embeddings.append(model(batch["imgs"].cuda()).cpu())
    return torch.cat(embeddings)
