"""A tiny random Llama with a byte-level BPE tokenizer trained here, saved as a Hugging Face folder (safetensors)."""

from __future__ import annotations

from pathlib import Path

import torch

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "a paged cache keeps keys and values in blocks",
    "continuous batching mixes decodes with prefill chunks",
    "what is the capital of france? paris is the capital of france.",
    "infera serves models over http and grpc",
    "the scheduler plans each step on an explicit clock",
    "prefix caching shares the blocks of a common prompt",
    "tokens stream to the client one at a time",
] * 20

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PROMPTS = [
    "the quick brown fox",
    "a paged cache keeps",
    "continuous batching mixes decodes",
    "what is the capital of france?",
    "infera serves models",
    "the scheduler plans each step on an explicit clock and",
    "prefix caching",
    "tokens stream to the client",
    "blocks of a common prompt are shared",
    "http and grpc and the lazy dog jumps over the quick brown fox",
]


def build_tiny_llama(folder: Path, seed: int = 0) -> Path:
    """Write config.json, model.safetensors and the tokenizer files of a random 2-layer Llama (hidden 64)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(SENTENCES, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", bos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.3,  # spread logits: greedy ties are then far rarer than float noise
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    return folder
