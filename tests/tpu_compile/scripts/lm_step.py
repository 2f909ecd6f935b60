"""A small language model trained with cross-entropy and AdamW from a DataLoader: the compiled check's CLI subject."""

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
VOCAB, WIDTH = 256, 512


class LM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, WIDTH)
        mlp = [torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(), torch.nn.Linear(4 * WIDTH, WIDTH)]
        self.blocks = torch.nn.Sequential(*mlp)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.emb(x)))


model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randint(0, VOCAB, (64, 32)), torch.randint(0, VOCAB, (64, 32)))
for x, y in DataLoader(data, batch_size=8):
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
