# origin: pytorch/pytorch | https://github.com/pytorch/pytorch/issues/25081 | -
# principle: 7
# expect: none
# tempts: AMP032, AMP033, AMP011
# summary: the AMP design's gradient-penalty recipe: out-of-place gradients of the scaled loss with create_graph, multiplied back by 1/get_scale() before the penalty, the penalty computed under autocast, then the usual scaled backward, step and update.
import torch


def train(model, optimizer, loss_fn, data):
    scaler = torch.amp.GradScaler("cuda")
    for input, target in data:
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            output = model(input)
            loss = loss_fn(output, target)
        grad_params = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
        inv_scale = 1.0 / scaler.get_scale()
        grad_params = [p * inv_scale for p in grad_params]
        with torch.autocast("cuda"):
            grad_norm = 0
            for grad in grad_params:
                grad_norm += grad.pow(2).sum()
            grad_norm = grad_norm.sqrt()
            loss = loss + grad_norm
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
