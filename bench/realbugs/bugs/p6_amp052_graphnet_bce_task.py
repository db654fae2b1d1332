# origin: graphnet-team/graphnet | https://github.com/graphnet-team/graphnet/issues/846 | src/graphnet/training/loss_functions.py
# principle: 6
# expect: AMP052 line 12
# summary: the binary classification task feeds sigmoid probabilities to a loss built on binary_cross_entropy; training with mixed precision (a Lightning precision setting) raises "unsafe to autocast".
import torch
import torch.nn.functional as F
from pytorch_lightning import LightningModule, Trainer


class BinaryCrossEntropyLoss(torch.nn.Module):
    def forward(self, prediction, target):
        return F.binary_cross_entropy(prediction, target, reduction="none")


class StandardModel(LightningModule):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        self.loss_function = BinaryCrossEntropyLoss()

    def training_step(self, batch, batch_idx):
        probability = torch.sigmoid(self.backbone(batch.x))
        return self.loss_function(probability, batch.y).mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def fit(model, loader):
    trainer = Trainer(accelerator="gpu", precision="16-mixed", max_epochs=10)
    trainer.fit(model, loader)
