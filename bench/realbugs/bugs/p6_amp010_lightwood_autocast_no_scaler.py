# origin: mindsdb/lightwood | https://github.com/mindsdb/lightwood/pull/380 | lightwood/mixers/nn.py
# principle: 6
# expect: AMP010 line 19,22
# summary: the mixer fitted its network under CUDA autocast (float16) with a plain loss.backward() and optimizer.step(); gradients underflowed and NaNs appeared.
# upstream-fix: PR #380 adds a GradScaler following the recommended usage.
import torch


class NnMixer:
    def __init__(self, net, optimizer, criterion):
        self.net = net
        self.optimizer = optimizer
        self.criterion = criterion

    def _iter_fit(self, data_loader, max_epochs):
        for epoch in range(max_epochs):
            for inputs, labels in data_loader:
                self.optimizer.zero_grad()
                with torch.autocast("cuda"):
                    outputs = self.net(inputs)
                    loss = self.criterion(outputs, labels)
                loss.backward()
                self.optimizer.step()
