"""README: trains a small causal transformer language model on synthetic token sequences (AdamW).

A plain fp32 training script, one of the fixtures `amp-lint verify` converts to AMP and runs both ways.
The "language" is a fixed random Markov chain: the next token is a fixed successor of the current one 90% of
the time and uniformly random otherwise, so the model must learn the successor table through a causal
nn.TransformerEncoder; the loss falls from log(vocab) towards the chain's entropy. Batches are cut by hand
from a shuffled tensor. VERIFY_SCALE (default 1) widens the model and the batch for a GPU;
AMP_LINT_VERIFY_DEVICE, when set, chooses the device.
"""

import argparse
import math
import os

import torch
from torch import nn

VOCAB_SIZE = 32
SEQ_LEN = 32


def make_sequences(n_sequences, generator):
    successor = torch.randperm(VOCAB_SIZE, generator=generator)
    tokens = torch.empty(n_sequences, SEQ_LEN + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, VOCAB_SIZE, (n_sequences,), generator=generator)
    for position in range(1, SEQ_LEN + 1):
        random_tokens = torch.randint(0, VOCAB_SIZE, (n_sequences,), generator=generator)
        follow = torch.rand(n_sequences, generator=generator) < 0.9
        tokens[:, position] = torch.where(follow, successor[tokens[:, position - 1]], random_tokens)
    return tokens


class TinyLM(nn.Module):
    def __init__(self, d_model, n_heads, n_layers):
        super().__init__()
        self.token_embedding = nn.Embedding(VOCAB_SIZE, d_model)
        self.position_embedding = nn.Embedding(SEQ_LEN, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers)
        self.head = nn.Linear(d_model, VOCAB_SIZE)
        self.register_buffer("causal_mask", nn.Transformer.generate_square_subsequent_mask(SEQ_LEN))

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        hidden = self.token_embedding(tokens) * math.sqrt(self.token_embedding.embedding_dim)
        hidden = hidden + self.position_embedding(positions)
        hidden = self.encoder(hidden, mask=self.causal_mask, is_causal=True)
        return self.head(hidden)


def main():
    parser = argparse.ArgumentParser(description="Train a tiny causal transformer LM on synthetic tokens.")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    scale = int(os.environ.get("VERIFY_SCALE", "1"))
    device = torch.device(os.environ.get("AMP_LINT_VERIFY_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))

    batch_size = 16 * scale
    data = make_sequences(32 * batch_size, torch.Generator().manual_seed(0))
    model = TinyLM(d_model=64 * scale, n_heads=4, n_layers=2).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    shuffle = torch.Generator().manual_seed(1)

    for epoch in range(args.epochs):
        order = torch.randperm(len(data), generator=shuffle)
        for start in range(0, len(data), batch_size):
            batch = data[order[start : start + batch_size]].to(device)
            inputs, targets = batch[:, :-1], batch[:, 1:]
            optimizer.zero_grad()
            logits = model(inputs)
            loss = loss_fn(logits.reshape(-1, VOCAB_SIZE), targets.reshape(-1))
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
