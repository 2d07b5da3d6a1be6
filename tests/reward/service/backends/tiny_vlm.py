"""Build a tiny, randomly initialised Qwen2.5-VL checkpoint offline (for the vlm backend tests).

The tokenizer is a small byte-level BPE trained here with the `tokenizers` library on a few
prompt-like sentences, carrying Qwen's special tokens; the model has one 32-wide text layer and
one vision block. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

CORPUS = [
    "You are a careful judge of robot manipulation progress.",
    "Compare them and judge how much closer Image-2 is to completing the task than Image-1.",
    "Answer with one number inside <answer>42</answer> <think>reasoning</think>",
    "0 1 2 3 4 5 6 7 8 9 10 25 50 75 100 -100 % / . system user assistant",
    "put the bowl on the plate, open the drawer, pick up the cup",
    # whole-word tokens for the True/False question of the topreward preset
    "Has the robot completed the task? Answer True or False. True False True False",
]


def build_tiny_qwen2_5_vl(directory: Path, seed: int = 0, max_positions: int = 4096) -> Path:
    """Write a tiny random Qwen2.5-VL (model, tokenizer, image processor) to `directory`.

    ``max_positions`` bounds prompt plus answer length (a long one lets a test generate for
    seconds).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2TokenizerFast,
        Qwen2VLImageProcessor,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": tok.get_vocab_size(),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": max_positions,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 2, 4],
            },
            # transformers 4.x reads the same settings from these two keys
            "rope_theta": 10000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 2, 4]},
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 32,
            "fullatt_block_indexes": [0],
            "window_size": 56,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=112 * 112).save_pretrained(directory)
    return directory
