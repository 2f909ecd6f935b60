"""pytorch/examples word_language_model's idioms, small: the device from torch.accelerator, the data batchified
on the device, an LSTM LM trained by hand (clip_grad_norm_, then p.data.add_(p.grad, alpha=-lr): no optimizer),
the whole model saved with torch.save(model, f) when the validation loss improves, reloaded with torch.load(f)
and flatten_parameters(), then evaluated on the test split. Local synthetic text (a Markov chain), no downloads.

argv: SAVE_PATH EPOCHS [sync]. ``sync``: torch_xla.sync() right after each hand-written update (a step boundary
there; the script itself has none). Prints one JSON line: the validation loss of every epoch, the test loss of the model in
memory at its last save, the test loss after the reload, and whether the reloaded parameters equal the saved ones.
"""

import json
import sys

import torch
import torch.nn as nn

SAVE, EPOCHS, SYNC = sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["sync"]
BPTT, BATCH, EVAL_BATCH, VOCAB = 5, 4, 4, 12
torch.manual_seed(1111)
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
source = torch.Generator().manual_seed(0)
transitions = torch.softmax(torch.randn(VOCAB, VOCAB, generator=source) * 3, dim=1)


def text(n: int) -> torch.Tensor:
    ids = [0]
    for _ in range(n - 1):
        ids.append(int(torch.multinomial(transitions[ids[-1]], 1, generator=source)))
    return torch.tensor(ids)


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    rows = data.size(0) // bsz
    return data.narrow(0, 0, rows * bsz).view(bsz, -1).t().contiguous().to(device)


class LanguageModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Embedding(VOCAB, 8)
        self.rnn = nn.LSTM(8, 8, 1)
        self.decoder = nn.Linear(8, VOCAB)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, x: torch.Tensor, hidden: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, VOCAB), hidden

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        weight = next(self.parameters())
        return weight.new_zeros(1, bsz, 8), weight.new_zeros(1, bsz, 8)


train_data, val_data, test_data = batchify(text(84), BATCH), batchify(text(44), EVAL_BATCH), batchify(text(44), EVAL_BATCH)
model = LanguageModel().to(device)
criterion = nn.CrossEntropyLoss()


def batch(data: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = min(BPTT, len(data) - 1 - i)
    return data[i : i + n], data[i + 1 : i + 1 + n].reshape(-1)


def evaluate(data: torch.Tensor) -> float:
    model.eval()
    total, hidden = 0.0, model.init_hidden(EVAL_BATCH)
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, BPTT):
            x, y = batch(data, i)
            out, hidden = model(x, hidden)
            hidden = tuple(h.detach() for h in hidden)
            total += len(x) * criterion(out, y).item()
    return total / (len(data) - 1)


def train(lr: float) -> None:
    model.train()
    hidden = model.init_hidden(BATCH)
    for i in range(0, train_data.size(0) - 1, BPTT):
        x, y = batch(train_data, i)
        model.zero_grad()
        hidden = tuple(h.detach() for h in hidden)
        out, hidden = model(x, hidden)
        loss = criterion(out, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        if SYNC:
            import torch_xla

            torch_xla.sync()


def weights(m: nn.Module) -> list[list[float]]:
    return [p.detach().cpu().flatten().tolist() for p in m.parameters()]


lr, best, vals, saved = 20.0, None, [], None
for epoch in range(EPOCHS):
    train(lr)
    val = evaluate(val_data)
    vals.append(val)
    if best is None or val < best:
        with open(SAVE, "wb") as f:
            torch.save(model, f)
        best, saved = val, (weights(model), evaluate(test_data))
    else:
        lr /= 4.0
with open(SAVE, "rb") as f:
    model = torch.load(f, weights_only=False)
    model.rnn.flatten_parameters()
assert saved is not None
test = evaluate(test_data)
equal = weights(model) == saved[0]
print(json.dumps({"device": str(device), "vals": vals, "test_in_memory": saved[1], "test": test, "reloaded_equal": equal}))
