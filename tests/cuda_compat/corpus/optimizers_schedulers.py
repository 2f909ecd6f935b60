"""Every torch.optim optimizer (default, foreach, fused where the CPU has it) with a learning-rate scheduler, 3 steps."""

import _digest
import torch

OPTIMIZERS = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop"]
SCHEDULERS = {
    "StepLR": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5),
    "CosineAnnealingLR": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=3),
    "OneCycleLR": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=4, cycle_momentum=False),
    "LambdaLR": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda step: 1 / (1 + step)),
}
variants = [{}, {"foreach": True}]
for i, name in enumerate(OPTIMIZERS):
    cls = getattr(torch.optim, name)
    for variant in variants + ([{"fused": True}] if name in ("SGD", "Adam", "AdamW", "Adagrad") else []):
        torch.manual_seed(i)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        options = {"lr": 0.05, **variant}
        optimizer = cls(model.parameters(), **options)
        scheduler = list(SCHEDULERS.values())[i % len(SCHEDULERS)](optimizer)
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(7))
        for _ in range(3):
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()
            scheduler.step()
        _digest.record(f"{name}.{sorted(variant)}", [dict(model.named_parameters()), scheduler.get_last_lr()])
_digest.done()
