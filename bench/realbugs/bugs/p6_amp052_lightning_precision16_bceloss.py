# origin: Lightning-AI/pytorch-lightning | https://github.com/Lightning-AI/pytorch-lightning/issues/13871 | -
# principle: 6
# expect: AMP052 line 20
# summary: a LightningModule computes nn.BCELoss on sigmoid outputs in training_step; the Trainer's precision=16 runs training_step under CUDA autocast, which rejects binary_cross_entropy.
import torch
from pytorch_lightning import LightningModule, Trainer


class BoringModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)
        self.loss_fn = torch.nn.BCELoss()

    def forward(self, x):
        return torch.sigmoid(self.layer(x))

    def training_step(self, batch, batch_idx):
        output = self(batch[0])
        loss = self.loss_fn(output, batch[1].half())
        self.log("train_loss", loss)
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)


def run(train_data):
    trainer = Trainer(accelerator="gpu", devices=1, max_epochs=1, precision=16)
    trainer.fit(BoringModel(), train_data)
