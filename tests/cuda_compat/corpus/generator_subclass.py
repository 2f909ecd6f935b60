"""A torch.Generator subclass with its own methods, generators handed to samplers, and generators pickled."""

import pickle

import _digest
import torch
from torch.utils.data import DataLoader, RandomSampler


class Seeded(torch.Generator):
    """A generator that knows its seed (the subclass idiom of data pipelines)."""

    def reseeded(self, seed: int) -> "Seeded":
        self.manual_seed(seed)
        self.seed_used = seed
        return self


g = Seeded().reseeded(7)
_digest.record("subclass", [type(g).__name__, isinstance(g, torch.Generator), issubclass(Seeded, torch.Generator), g.seed_used])
_digest.record("draws", [torch.randn(3, generator=g), torch.randint(0, 9, (4,), generator=g)])
order = list(DataLoader(range(10), sampler=RandomSampler(range(10), generator=Seeded().reseeded(3)), batch_size=5))
_digest.record("sampler", order)
state = g.get_state()
back = pickle.loads(pickle.dumps(torch.Generator))
_digest.record("pickled_type", [back.__name__, isinstance(torch.Generator(), back)])
plain = torch.Generator()
plain.set_state(state)
_digest.record("state", torch.rand(2, generator=plain))
_digest.done()
