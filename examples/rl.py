"""Device-neutral GRPO: a rollout role samples groups, a trainer role learns from them, weights go back each iteration.

    python examples/rl.py --iterations 20                                                     # both roles follow ANYDEVICE
    ANYDEVICE_ROLES=trainer=xla,rollout=cpu PJRT_DEVICE=CPU python examples/rl.py             # one process, two devices
    ANYDEVICE_ROLES=trainer=xla,rollout=cpu PJRT_DEVICE=CPU python examples/rl.py --ray       # one Ray actor per role

The policy is a tiny random-init causal LM built from a config (no download). The task: complete a
random prompt; the reward of a completion is the fraction of its tokens equal to TARGET. GRPO: each
prompt is sampled GROUP times on the rollout role, advantages are the rewards normalised within the
group, the trainer minimises the clipped surrogate plus a KL penalty to a frozen reference copy, and
the trainer's weights are synced to the rollout each iteration (the transport the roles' plan names).
Sampling draws its Gumbel noise from a seeded CPU generator, so every placement samples the same
tokens from the same logits. Metrics stay on the device until the end (or every --log-every
iterations); the last line is one JSON object: iterations, mean_reward, last_loss, roles, the curves.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

import anydevice as ad
from anydevice.runtime import roles

VOCAB, PROMPT, NEW, GROUP, PROMPTS, TARGET = 16, 4, 8, 8, 4, 3
CLIP, BETA, UPDATES, TEMPERATURE = 0.2, 0.04, 2, 1.0


def build_model(seed: int) -> torch.nn.Module:
    """A 2-layer Llama with 16 tokens, initialised from ``seed`` on the CPU (the same weights for every placement)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=PROMPT + NEW, tie_word_embeddings=False,
    )  # fmt: skip
    config._attn_implementation = "eager"  # the same attention on every device
    return LlamaForCausalLM(config)


class Rollout:
    """The rollout role: samples GROUP completions per prompt with the latest weights it was sent."""

    def __init__(self, seed: int) -> None:
        self.device = ad.device(role="rollout")
        self.model = build_model(seed).to(self.device).eval()
        self.noise = torch.Generator().manual_seed(seed + 1)

    def load(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)

    @torch.no_grad()
    def sample(self, prompts: torch.Tensor) -> torch.Tensor:
        seqs = prompts.repeat_interleave(GROUP, 0).to(self.device)
        for _ in range(NEW):
            logits = self.model(seqs).logits[:, -1].float() / TEMPERATURE
            uniform = torch.rand(logits.shape, generator=self.noise).clamp_(1e-9, 1 - 1e-9)
            gumbel = -torch.log(-torch.log(uniform))  # drawn on the CPU: the same noise on every device
            seqs = torch.cat([seqs, (logits + gumbel.to(self.device)).argmax(-1, keepdim=True)], 1)
        ad.step(role="rollout")
        return seqs

    def where(self) -> str:
        return str(self.device)


class Trainer:
    """The trainer role: group-normalised advantages, clipped surrogate + KL to the frozen reference."""

    def __init__(self, seed: int, lr: float) -> None:
        self.device = ad.device(role="trainer")
        self.policy = build_model(seed).to(self.device)
        self.reference = build_model(seed).to(self.device).requires_grad_(False)
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=lr)
        self.rewards: list[torch.Tensor] = []
        self.losses: list[torch.Tensor] = []

    def logprobs(self, model: torch.nn.Module, seqs: torch.Tensor) -> torch.Tensor:
        logits = model(seqs).logits[:, PROMPT - 1 : -1].float()
        return torch.log_softmax(logits, -1).gather(-1, seqs[:, PROMPT:, None]).squeeze(-1)

    def train(self, seqs: torch.Tensor) -> None:
        seqs = seqs.to(self.device)
        reward = (seqs[:, PROMPT:] == TARGET).float().mean(1)
        grouped = reward.view(-1, GROUP)
        advantage = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1, 1)
        with torch.no_grad():
            old, ref = self.logprobs(self.policy, seqs), self.logprobs(self.reference, seqs)
        for _ in range(UPDATES):
            new = self.logprobs(self.policy, seqs)
            ratio = (new - old).exp()
            surrogate = torch.minimum(ratio * advantage, ratio.clamp(1 - CLIP, 1 + CLIP) * advantage)
            kl = (ref - new).exp() - (ref - new) - 1  # k3 estimator, >= 0
            loss = (BETA * kl - surrogate).mean()
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            ad.step(role="trainer")
        self.rewards.append(reward.mean().detach())
        self.losses.append(loss.detach())

    def weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights on the host, for a rollout in another process (a same-process rollout reads them directly)."""
        return {k: v.detach().to("cpu") for k, v in self.policy.state_dict().items()}

    def metrics(self) -> dict[str, list[float]]:
        """The curves, read to the host once (at the end, or every --log-every iterations)."""
        return {"rewards": torch.stack(self.rewards).tolist(), "losses": torch.stack(self.losses).tolist()}

    def where(self) -> str:
        return str(self.device)


def prompts(seed: int, iterations: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 2)
    return [torch.randint(VOCAB, (PROMPTS, PROMPT), generator=g) for _ in range(iterations)]


def run_one_process(args: argparse.Namespace, plan: roles.Plan) -> tuple[dict[str, list[float]], dict[str, str]]:
    trainer, rollout = Trainer(args.seed, args.lr), Rollout(args.seed)
    for i, batch in enumerate(prompts(args.seed, args.iterations)):
        trainer.train(rollout.sample(batch))
        rollout.load(trainer.policy.state_dict())  # same-process copy (device to device)
        if args.log_every and (i + 1) % args.log_every == 0:
            print(f"iteration {i + 1}: reward {trainer.metrics()['rewards'][-1]:.4f}", flush=True)
    return trainer.metrics(), {"trainer": trainer.where(), "rollout": rollout.where()}


def run_ray(args: argparse.Namespace, plan: roles.Plan) -> tuple[dict[str, list[float]], dict[str, str]]:
    import ray

    from anydevice.integrations.ray import role_groups

    ray.init(address="local", num_cpus=2, object_store_memory=200 * 2**20, include_dashboard=False, log_to_driver=False)
    try:
        groups, _ = role_groups(
            {"trainer": (Trainer, 1), "rollout": (Rollout, 1)},
            weights_from="trainer",
            args={"trainer": (args.seed, args.lr), "rollout": (args.seed,)},
        )
        trainer, rollout = groups["trainer"][0], groups["rollout"][0]
        for i, batch in enumerate(prompts(args.seed, args.iterations)):
            ray.get(trainer.train.remote(rollout.sample.remote(batch)))
            ray.get(rollout.load.remote(trainer.weights.remote()))  # through Ray's object store (shared memory on one node)
            if args.log_every and (i + 1) % args.log_every == 0:
                print(f"iteration {i + 1}: reward {ray.get(trainer.metrics.remote())['rewards'][-1]:.4f}", flush=True)
        metrics: dict[str, list[float]] = ray.get(trainer.metrics.remote())
        return metrics, {"trainer": ray.get(trainer.where.remote()), "rollout": ray.get(rollout.where.remote())}
    finally:
        ray.shutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=20, help="GRPO iterations")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="seeds the weights, the prompts and the sampling noise")
    p.add_argument("--ray", action="store_true", help="one Ray actor per role (ANYDEVICE_ROLES), weights via the object store")
    p.add_argument("--log-every", type=int, default=0, help="read the metrics to the host every N iterations (0: at the end)")
    args = p.parse_args()
    if args.ray:
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            print(f"error: --ray needs Ray ({exc}): pip install 'ray[default]', or leave out --ray", file=sys.stderr)
            return 2
    try:
        plan = roles.plan(["trainer", "rollout"], same_process=not args.ray, weights_from="trainer")  # before any start
    except ad.AnyDeviceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sync = plan.syncs[0]
    metrics, where = (run_ray if args.ray else run_one_process)(args, plan)
    result: dict[str, Any] = {
        "iterations": args.iterations,
        "mean_reward": sum(metrics["rewards"]) / len(metrics["rewards"]),
        "last_loss": metrics["losses"][-1],
        "roles": where,
        "weight_sync": sync.transport if not args.ray or sync.transport != roles.COLLECTIVE else roles.OBJECT_STORE,
        "rewards": metrics["rewards"],
        "losses": metrics["losses"],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
