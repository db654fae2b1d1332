# origin: princeton-vl/RAFT | https://github.com/princeton-vl/RAFT/issues/104 | train.py
# principle: 7
# expect: none
# tempts: AMP020, AMP021, AMP022
# summary: a user thought optimizer.step() was missing; the loop unscales, clips, steps through the scaler, steps the LR scheduler, then updates the scaler, which is the documented order.
import torch


def train(model, optimizer, scheduler, train_loader, args):
    scaler = torch.amp.GradScaler("cuda", enabled=args.mixed_precision)
    for data_blob in train_loader:
        optimizer.zero_grad()
        image1, image2, flow, valid = [x.cuda() for x in data_blob]
        with torch.autocast("cuda", enabled=args.mixed_precision):
            flow_predictions = model(image1, image2, iters=args.iters)
            loss = sum((p - flow).abs().mean() for p in flow_predictions)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        scaler.step(optimizer)
        scheduler.step()
        scaler.update()
