# origin: hkchengrex/STCN | https://github.com/hkchengrex/STCN/issues/44 | model/model.py
# principle: 7
# expect: none
# tempts: AMP020, AMP021
# summary: the model wrapper owns the scaler and steps the optimizer only through self.scaler.step(self.optimizer) (line 163); the LR scheduler steps after the scaler's update. A user asked whether optimizer.step() was missing.
import torch


class STCNModel:
    def __init__(self, net, optimizer, scheduler, para):
        self.net = net
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.scaler = torch.amp.GradScaler("cuda", enabled=para["amp"])
        self.para = para

    def do_pass(self, data, it):
        with torch.autocast("cuda", enabled=self.para["amp"]):
            losses = self.net(data)
        self.optimizer.zero_grad(set_to_none=True)
        if self.para["amp"]:
            self.scaler.scale(losses["total_loss"]).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            losses["total_loss"].backward()
            self.optimizer.step()
        self.scheduler.step()
        return losses
