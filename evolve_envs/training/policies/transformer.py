"""A small vision-language-action policy from Hugging Face ``transformers`` configs (random
weights, nothing downloaded): ViT frames, the instruction through a word-level tokenizer and a
one-layer BERT, a state MLP, Gaussian action and value heads (docs/training.md).

Example:
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> obs_space = spaces.Dict({"image": spaces.Box(0, 255, (64, 64, 3), np.uint8),
    ...                          "state": spaces.Box(-1, 1, (3,), np.float32)})
    >>> pol = TinyVLAPolicy.from_spaces(obs_space, spaces.Box(-1, 1, (2,), np.float32))
    >>> obs = {"image": np.zeros((2, 64, 64, 3), np.uint8), "state": np.zeros((2, 3), np.float32),
    ...        "task_description": np.array(["pick up the red block"] * 2)}
    >>> actions, logp = pol.act(pol.encode_obs(obs))
    >>> actions.shape, logp.shape
    ((2, 2), (2,))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn
from torch.distributions import Distribution, Independent, Normal

from evolve_envs.training.policies.base import Policy, downscale_images

if TYPE_CHECKING:
    import gymnasium as gym
    from transformers import PreTrainedTokenizerFast

__all__ = ["INSTRUCTION_WORDS", "TinyVLAPolicy", "build_instruction_tokenizer"]

#: The word list of the built-in tokenizer: ReachPlace's and LIBERO's instruction words (other
#: words map to ``[UNK]``).
INSTRUCTION_WORDS = (
    "pick up the red block and place it in green zone put on top of a to open close turn "
    "push pull drawer cabinet bowl plate black white yellow blue stove basket bottle mug cup "
    "left right front back middle both into onto off microwave door book caddy wine rack "
    "ketchup tomato sauce butter milk cream cheese alphabet soup salad dressing bbq box "
    "chocolate pudding orange juice frying pan moka pot flat top shelf"
).split()


def build_instruction_tokenizer(
    words: Iterable[str] = INSTRUCTION_WORDS,
) -> PreTrainedTokenizerFast:
    """A word-level ``PreTrainedTokenizerFast`` over ``words`` (``[PAD]`` = 0, ``[UNK]`` = 1), built
    in memory."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1}
    for w in words:
        vocab.setdefault(w.lower(), len(vocab))
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")


class TinyVLAPolicy(Policy):
    """ViT image encoder + BERT instruction encoder + state MLP -> Gaussian actions and a value;
    ``image_size`` must be a multiple of ``patch_size``, both encoders share ``hidden``."""

    def __init__(
        self,
        action_dim: int,
        state_dim: int,
        *,
        image_key: str = "image",
        state_key: str = "state",
        image_size: int = 32,
        patch_size: int = 8,
        hidden: int = 32,
        layers: int = 1,
        heads: int = 2,
        max_text_len: int = 16,
        init_log_std: float = -0.5,
    ) -> None:
        super().__init__()
        import transformers

        self.image_key, self.state_key = image_key, state_key
        self.image_size, self.max_text_len = int(image_size), int(max_text_len)
        self.tokenizer = build_instruction_tokenizer()
        self.vision = transformers.ViTModel(
            transformers.ViTConfig(
                image_size=image_size,
                patch_size=patch_size,
                num_channels=3,
                hidden_size=hidden,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                intermediate_size=2 * hidden,
            ),
            add_pooling_layer=False,
        )
        self.text = transformers.BertModel(
            transformers.BertConfig(
                vocab_size=len(self.tokenizer),
                hidden_size=hidden,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                intermediate_size=2 * hidden,
                max_position_embeddings=max(32, max_text_len),
                pad_token_id=0,
            ),
            add_pooling_layer=False,
        )
        self.state_dim = int(state_dim)
        self.state = nn.Linear(max(1, state_dim), hidden)
        feat = 3 * hidden
        self.trunk = nn.Sequential(nn.Linear(feat, 2 * hidden), nn.Tanh())
        self.mu = nn.Linear(2 * hidden, action_dim)
        self.log_std = nn.Linear(2 * hidden, action_dim)
        nn.init.zeros_(self.log_std.weight)
        nn.init.constant_(self.log_std.bias, init_log_std)
        self.value_head = nn.Sequential(
            nn.Linear(feat, 2 * hidden), nn.Tanh(), nn.Linear(2 * hidden, 1)
        )

    @classmethod
    def from_spaces(
        cls, observation_space: gym.Space, action_space: gym.spaces.Box, **kwargs: object
    ) -> TinyVLAPolicy:
        """Sizes from the env's spaces (``state_key``'s box, the action box)."""
        state_key = kwargs.get("state_key", "state")
        spaces = getattr(observation_space, "spaces", {})
        state_dim = int(np.prod(spaces[state_key].shape)) if state_key in spaces else 0
        return cls(int(np.prod(action_space.shape)), state_dim, **kwargs)

    def encode_obs(self, obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        images = np.asarray(obs[self.image_key])
        n = images.shape[0]
        text = obs.get("task_description", "")
        texts = [str(text)] * n if isinstance(text, str) else [str(t) for t in np.ravel(text)]
        enc = self.tokenizer(
            texts, padding="max_length", truncation=True, max_length=self.max_text_len
        )
        if self.state_dim:
            state = np.asarray(obs[self.state_key], np.float32).reshape(n, -1)
        else:
            state = np.zeros((n, 1), np.float32)
        return {
            "pixels": downscale_images(images, self.image_size),
            "state": state,
            "text_ids": np.asarray(enc["input_ids"], np.int64),
            "text_mask": np.asarray(enc["attention_mask"], np.int64),
        }

    def forward(self, inputs: dict[str, torch.Tensor]) -> tuple[Distribution, torch.Tensor]:
        pixels = inputs["pixels"].to(torch.float32).permute(0, 3, 1, 2) / 127.5 - 1.0
        vis = self.vision(pixel_values=pixels).last_hidden_state[:, 0]
        mask = inputs["text_mask"].long()
        txt = self.text(input_ids=inputs["text_ids"].long(), attention_mask=mask)
        txt = txt.last_hidden_state[:, 0]
        st = torch.tanh(self.state(inputs["state"].to(torch.float32)))
        feats = torch.cat([vis, txt, st], dim=-1)
        h = self.trunk(feats)
        std = self.log_std(h).clamp(-5.0, 2.0).exp()
        return Independent(Normal(self.mu(h), std), 1), self.value_head(feats).squeeze(-1)
