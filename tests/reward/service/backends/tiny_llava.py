"""Build a tiny, randomly initialised LLaVA checkpoint offline (for the OpenAI-compatible tests).

`transformers serve` loads a model with `AutoProcessor`; Qwen2.5-VL's processor needs a video
processor (torchvision), LLaVA's needs only a CLIP image processor and a tokenizer with a chat
template, so the served judge is a LLaVA: one 32-wide text layer, one vision layer on 28x28
images. The tokenizer is a small byte-level BPE trained here with the `tokenizers` library.
Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>"]
CORPUS = [
    "You are a careful judge of robot manipulation progress.",
    "Compare them and judge how much closer Image-2 is to completing the task than Image-1.",
    "Answer with one number inside <answer>42</answer> 0 1 2 3 4 5 6 7 8 9 10 25 50 75 100 -100",
    "system user assistant put the bowl on the plate, open the drawer",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_llava(directory: Path, seed: int = 0) -> Path:
    """Write a tiny random LLaVA (model, tokenizer, processor, chat template) to `directory`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        model_input_names=["input_ids", "attention_mask"],
        additional_special_tokens=["<|im_start|>", "<image>"],
    )
    tokenizer.image_token = "<image>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=28,
            patch_size=14,
            projection_dim=32,
        ).to_dict(),
        text_config=LlamaConfig(
            vocab_size=tok.get_vocab_size(),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=2048,
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
        ).to_dict(),
        image_token_index=ids["<image>"],
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        chat_template=CHAT_TEMPLATE,
        num_additional_image_tokens=1,
    )
    processor.save_pretrained(directory)
    return directory
