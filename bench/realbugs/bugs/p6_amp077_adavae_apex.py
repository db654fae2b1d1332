# origin: ImKeTT/AdaVAE | https://github.com/ImKeTT/AdaVAE/pull/1 | -
# principle: 6
# expect: AMP077 line 12
# summary: the language-model training script uses apex.amp for fp16; apex's amp is deprecated in favour of torch.amp.
# upstream-fix: PR #1 migrates imports, model initialisation and train_step to PyTorch AMP.
from apex import amp


def train_step(model, optimizer, loss_fn, batch, fp16):
    loss = loss_fn(model(batch), batch)
    if fp16:
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
    else:
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
