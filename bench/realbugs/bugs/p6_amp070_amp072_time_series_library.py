# origin: thuml/Time-Series-Library | https://github.com/thuml/Time-Series-Library/issues/740 | exp/exp_long_term_forecasting.py
# principle: 6
# expect: AMP072 line 17
# expect: AMP070 line 22
# summary: the experiment uses both torch.cuda.amp.GradScaler() and torch.cuda.amp.autocast(); both warn that they are deprecated.
import torch


class Exp_Long_Term_Forecast:
    def __init__(self, args, model, criterion):
        self.args = args
        self.model = model
        self.criterion = criterion

    def train(self, train_loader, model_optim):
        if self.args.use_amp:
            scaler = torch.cuda.amp.GradScaler()
        for epoch in range(self.args.train_epochs):
            for batch_x, batch_y in train_loader:
                model_optim.zero_grad()
                if self.args.use_amp:
                    with torch.cuda.amp.autocast():
                        outputs = self.model(batch_x)
                        loss = self.criterion(outputs, batch_y)
                    scaler.scale(loss).backward()
                    scaler.step(model_optim)
                    scaler.update()
                else:
                    outputs = self.model(batch_x)
                    loss = self.criterion(outputs, batch_y)
                    loss.backward()
                    model_optim.step()
