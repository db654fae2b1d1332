# origin: Linesight-RL/linesight | https://github.com/Linesight-RL/linesight/pull/53 | -
# also: https://github.com/Linesight-RL/linesight/issues/51
# principle: 6
# expect: AMP072 line 12
# summary: the learner builds torch.cuda.amp.GradScaler(), which warns "torch.cuda.amp.GradScaler(args...) is deprecated".
# upstream-fix: PR #53 uses torch.amp.GradScaler("cuda").
# fix-check: torch\.amp\.GradScaler\(["']cuda["']
import torch


def learner_process(online_network, optimizer, buffer, n_steps):
    scaler = torch.cuda.amp.GradScaler()
    for _ in range(n_steps):
        batch = buffer.sample()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = online_network.loss(batch)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(online_network.parameters(), 30)
        scaler.step(optimizer)
        scaler.update()
