# origin: mk-minchul/AdaFace | https://github.com/mk-minchul/AdaFace/issues/127 | -
# principle: 6
# expect: AMP050 line 13,30
# summary: a PReLU layer was changed to float16 parameters in a model trained with a GradScaler; unscale_ raises "Attempting to unscale FP16 gradients".
import torch
from torch import nn


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3, padding=1)
        self.act = nn.PReLU(64, dtype=torch.float16)
        self.head = nn.Linear(64, 512)

    def forward(self, x):
        return self.head(self.act(self.conv(x)).mean(dim=(2, 3)))


def train(loader, epochs):
    model = Backbone().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(epochs):
        for images, labels in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
