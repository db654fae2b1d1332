# origin: IAHispano/Applio | https://github.com/IAHispano/Applio/pull/860 | rvc/train/train.py
# principle: 5
# expect: AMP020 line 30
# summary: after both networks are stepped through the GradScaler, the loop also calls optim_g.step() and optim_d.step() directly: a second, unguarded step of each optimizer.
# upstream-fix: PR #860 (closed; the change was carried into another PR) removes the two direct steps.
# fix-check: ^(?![\s\S]*optim_[gd]\.step\(\))
import torch


def train_and_evaluate(net_g, net_d, optim_g, optim_d, scaler, loader, losses):
    for batch in loader:
        with torch.autocast("cuda", enabled=True):
            y_hat = net_g(batch)
            loss_disc = losses.discriminator(net_d, batch, y_hat.detach())
        optim_d.zero_grad()
        scaler.scale(loss_disc).backward()
        scaler.unscale_(optim_d)
        torch.nn.utils.clip_grad_norm_(net_d.parameters(), 1000.0)
        scaler.step(optim_d)

        with torch.autocast("cuda", enabled=True):
            loss_gen_all = losses.generator(net_d, batch, y_hat)
        optim_g.zero_grad()
        scaler.scale(loss_gen_all).backward()
        scaler.unscale_(optim_g)
        torch.nn.utils.clip_grad_norm_(net_g.parameters(), 1000.0)
        scaler.step(optim_g)
        scaler.update()

        optim_g.step()
        optim_d.step()
