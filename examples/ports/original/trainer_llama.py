"""Hugging Face Trainer on a tiny random-init Llama."""

import json
import sys
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 32, length: int = 16, vocab: int = 64) -> None:
        self.data = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


def main(steps: int) -> None:
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=4,
            learning_rate=1e-3,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            seed=0,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Tokens())
        trainer.train()
    dist = torch.distributed
    print(
        json.dumps(
            {
                "rank": args.process_index,
                "world_size": args.world_size,
                "group_size": dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1,
                "device": str(next(model.parameters()).device),
                "optim": str(getattr(args.optim, "value", args.optim)),
                "losses": [row["loss"] for row in trainer.state.log_history if "loss" in row],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
