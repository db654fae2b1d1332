# origin: megagonlabs/ditto | https://github.com/megagonlabs/ditto/pull/32 | ditto_light/ditto.py
# principle: 6
# expect: AMP077 line 12
# summary: fp16 training goes through NVIDIA apex.amp (amp.initialize / amp.scale_loss), deprecated in favour of torch.amp.
# upstream-fix: PR #32 (closed) ported it to torch.cuda.amp.
# fix-check: autocast\(
from apex import amp


def train(model, optimizer, train_iter, criterion, hp):
    if hp.fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    for batch in train_iter:
        x, y = batch
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        if hp.fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
