"""Hugging Face models saved and loaded with from_pretrained (transformers 5 builds them on the meta device):
buffers, logits and one AdamW step of BERT, RoBERTa, GPT-2, Llama and T5 (random tiny configs, no downloads)."""

import tempfile

import _digest

_digest.need("transformers")
import torch  # noqa: E402
import transformers as tf  # noqa: E402

SMALL = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 96}
MODELS = {
    "bert": (tf.BertModel, tf.BertConfig(num_hidden_layers=2, max_position_embeddings=32, **SMALL)),
    "roberta": (tf.RobertaModel, tf.RobertaConfig(num_hidden_layers=2, max_position_embeddings=40, **SMALL)),
    "gpt2": (tf.GPT2LMHeadModel, tf.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=96, n_positions=32)),
    "llama": (tf.LlamaForCausalLM, tf.LlamaConfig(num_hidden_layers=2, num_key_value_heads=1, **SMALL)),
    "t5": (tf.T5ForConditionalGeneration, tf.T5Config(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, vocab_size=96)),
}

for name, (cls, config) in MODELS.items():
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as saved:
        cls(config).save_pretrained(saved)
        model = cls.from_pretrained(saved).eval()
    _digest.record(f"{name}.buffers", dict(model.named_buffers()))
    _digest.record(f"{name}.parameters", dict(model.named_parameters()))
    ids = torch.randint(3, 90, (2, 8), generator=torch.Generator().manual_seed(1))
    extra = {"decoder_input_ids": ids} if name == "t5" else {}
    with torch.no_grad():
        _digest.record(f"{name}.logits", model(input_ids=ids, **extra)[0])
    model.train()
    torch.manual_seed(2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    output = model(input_ids=ids, **extra)[0]
    output.float().pow(2).mean().backward()
    optimizer.step()
    _digest.record(f"{name}.after_step", dict(model.named_parameters()))
_digest.done()
