# origin: neosr-project/neosr | https://github.com/neosr-project/neosr/pull/9 | -
# also: https://github.com/neosr-project/neosr/pull/50 (one GradScaler shared by generator and discriminator)
# principle: 7
# expect: none
# tempts: AMP023, AMP021
# summary: after "fix double scale.update" the GAN step scales each loss separately, steps the generator and the discriminator optimizers through one scaler, and calls update() once per iteration, as the docs prescribe for several optimizers.
import torch


def optimize_parameters(net_g, net_d, optimizer_g, optimizer_d, scaler, lq, gt, losses):
    with torch.autocast("cuda", dtype=torch.float16):
        output = net_g(lq)
        l_g_total = losses.pixel(output, gt) + losses.gan(net_d(output), True)
    scaler.scale(l_g_total).backward()
    scaler.unscale_(optimizer_g)
    torch.nn.utils.clip_grad_norm_(net_g.parameters(), 1.0)
    scaler.step(optimizer_g)
    optimizer_g.zero_grad(set_to_none=True)

    with torch.autocast("cuda", dtype=torch.float16):
        l_d_total = losses.gan(net_d(gt), True) + losses.gan(net_d(output.detach()), False)
    scaler.scale(l_d_total).backward()
    scaler.step(optimizer_d)
    optimizer_d.zero_grad(set_to_none=True)

    scaler.update()


def train(net_g, net_d, optimizer_g, optimizer_d, loader, losses):
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**5)
    for lq, gt in loader:
        optimize_parameters(net_g, net_d, optimizer_g, optimizer_d, scaler, lq, gt, losses)
