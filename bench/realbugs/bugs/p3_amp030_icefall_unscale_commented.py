# origin: k2-fsa/icefall | https://github.com/k2-fsa/icefall/pull/2081 | egs/grid/VSR/conformer_ctc2/train.py
# principle: 3
# expect: AMP030 line 20
# summary: a new recipe left `scaler.unscale_(optimizer)` commented out, so the norm clip runs on scaled gradients (flagged in the PR review).
# upstream-fix: the review asks to restore scaler.unscale_(optimizer) before clip_grad_norm_.
# fix-check: scaler\.unscale_\(optimizer\)\n\s*grad_norm = torch\.nn\.utils\.clip_grad_norm_
import torch


def train_one_epoch(params, model, optimizer, scheduler, scaler, train_dl):
    model.train()
    for batch in train_dl:
        params.batch_idx_train += 1
        with torch.autocast("cuda", enabled=params.use_fp16):
            loss = model(batch["inputs"], batch["supervisions"])
        scaler.scale(loss).backward()

        # scaler.unscale_(optimizer)

        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)

        scheduler.step_batch(params.batch_idx_train)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def run(params, model, optimizer, scheduler, train_dl):
    scaler = torch.amp.GradScaler("cuda", enabled=params.use_fp16)
    for epoch in range(params.num_epochs):
        train_one_epoch(params, model, optimizer, scheduler, scaler, train_dl)
