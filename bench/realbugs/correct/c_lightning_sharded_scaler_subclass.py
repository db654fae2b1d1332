# origin: Lightning-AI/pytorch-lightning | code-search | pytorch_lightning/overrides/pytorch.py
# principle: 7
# expect: none
# tempts: AMP020, AMP021, AMP091
# summary: a project subclass of GradScaler all-reduces the inf flags across shards in step() and then defers to GradScaler.step; the loop uses it like any GradScaler.
import torch
import torch.distributed as dist


class ShardedGradScaler(torch.amp.GradScaler):
    def step(self, optimizer, *args, **kwargs):
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        for v in optimizer_state["found_inf_per_device"].values():
            dist.all_reduce(v)
        return super().step(optimizer, *args, **kwargs)


def train(model, optimizer, loader):
    scaler = ShardedGradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda"):
            loss = model(batch)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
