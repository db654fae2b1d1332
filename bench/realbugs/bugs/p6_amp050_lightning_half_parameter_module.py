# origin: Lightning-AI/pytorch-lightning | https://github.com/Lightning-AI/pytorch-lightning/issues/7078 | -
# principle: 6
# expect: AMP050 line 17
# summary: an ArcFace margin head creates its weight as nn.Parameter(torch.HalfTensor(...)); with the Trainer's 16-bit precision the native scaler raises "Attempting to unscale FP16 gradients".
import math

import torch
import torch.nn.functional as F
from pytorch_lightning import LightningModule, Trainer
from torch import nn


class ArcMarginProduct(nn.Module):
    def __init__(self, in_features, out_features, scale=30.0, margin=0.50):
        super().__init__()
        self.scale = scale
        self.weight = nn.Parameter(torch.HalfTensor(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)
        self.cos_m, self.sin_m = math.cos(margin), math.sin(margin)

    def forward(self, input, label):
        cosine = F.linear(F.normalize(input), F.normalize(self.weight))
        sine = torch.sqrt(1.0 - torch.pow(cosine, 2)).to(cosine.dtype)
        phi = cosine * self.cos_m - sine * self.sin_m
        one_hot = F.one_hot(label, cosine.size(1)).to(cosine.dtype)
        return (one_hot * phi + (1.0 - one_hot) * cosine) * self.scale


class Model(LightningModule):
    def __init__(self, backbone, n_classes):
        super().__init__()
        self.backbone = backbone
        self.head = ArcMarginProduct(512, n_classes)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        logits = self.head(self.backbone(images), labels)
        return F.cross_entropy(logits, labels)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def fit(model, loader):
    Trainer(gpus=1, precision=16, max_epochs=10).fit(model, loader)
