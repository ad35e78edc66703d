"""Chat encoding for the Qwen-VL family: a chat (text and images) -> model inputs.

:class:`ChatEncoder` renders a chat with the model's chat template, runs each image
through the image processor (patches, grid, content digest; an LRU cache by the
image's bytes) and expands each image to its grid's number of ``<|image_pad|>``
tokens. The ``mm_token_type_ids`` it returns (1 on image tokens) go into every
forward pass: without them the model falls back to 1-D positions. Used by
:class:`~guiagent.policy.hf.TransformersPolicy` and, for the learner's copy of a
vLLM engine's prompts, by :mod:`guiagent.policy.vllm_backend`.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from guiagent.policy.base import Chat, ChatError, chat_images, check_chat, to_pil
from guiagent.policy.tiny import QWEN2_VL_CHAT_TEMPLATE

__all__ = ["IMAGE_TOKEN", "VISION_TOKENS", "Encoded", "ChatEncoder", "content_digest", "patches_digest"]

IMAGE_TOKEN = "<|image_pad|>"
VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


@dataclass(frozen=True)
class Encoded:
    """One chat as model inputs (no batch dimension)."""

    input_ids: list[int]
    mm_token_type_ids: list[int]
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    #: a content digest of each image (what the vision-feature cache is keyed by)
    image_keys: tuple[bytes, ...] = ()


class ChatEncoder:
    """Chat -> token ids with each image expanded to its grid's number of ``<|image_pad|>`` tokens."""

    def __init__(self, tokenizer: Any, image_processor: Any, chat_template: str | None = None,
                 image_cache_bytes: int = 1 << 30):
        self.tokenizer = tokenizer
        # Preprocessed images by their encoded bytes (LRU within a byte budget): a rollout's
        # screenshot is encoded for generation and again for the update, an SFT example every epoch.
        self._image_cache: "OrderedDict[bytes, tuple[torch.Tensor, torch.Tensor, bytes]]" = OrderedDict()
        self._image_cache_bytes = image_cache_bytes
        self._image_cache_used = 0
        self._chat_cache: "OrderedDict[int, tuple[Chat, Encoded]]" = OrderedDict()
        #: encoded chats kept (each holds its image patches: ~2 MB for 128 visual tokens)
        self.chat_cache_size = 128
        self.image_processor = image_processor
        self.chat_template = chat_template or tokenizer.chat_template
        if self.chat_template is None:
            self.chat_template = QWEN2_VL_CHAT_TEMPLATE
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        self.merge = int(image_processor.merge_size)

    def render(self, chat: Chat) -> str:
        """The prompt text with one ``<|image_pad|>`` per image and the assistant header."""
        plain = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str) else [
            {"type": "image"} if p["type"] == "image" else {"type": "text", "text": p["text"]}
            for p in m["content"]]} for m in chat]
        return self.tokenizer.apply_chat_template(
            plain, tokenize=False, add_generation_prompt=True, chat_template=self.chat_template)

    def encode(self, chat: Chat) -> Encoded:
        """Model inputs of ``chat``. The same chat object encoded again (a rollout's prompt scored in
        the update) is served from a small cache; chats are never mutated after they are built."""
        hit = self._chat_cache.get(id(chat))
        if hit is not None and hit[0] is chat:
            self._chat_cache.move_to_end(id(chat))
            return hit[1]
        enc = self._encode(chat)
        self._chat_cache[id(chat)] = (chat, enc)  # holding the chat keeps its id from being reused
        if len(self._chat_cache) > self.chat_cache_size:
            self._chat_cache.popitem(last=False)
        return enc

    def _encode(self, chat: Chat) -> Encoded:
        check_chat(chat)
        return self.encode_rendered(self.render(chat), chat_images(chat))

    def encode_rendered(self, text: str, images: Sequence[Any]) -> Encoded:
        """Model inputs of an already rendered prompt (one ``<|image_pad|>`` per image) and its images:
        what a vLLM-style engine receives."""
        pieces = text.split(IMAGE_TOKEN)
        if len(pieces) - 1 != len(images):
            raise ChatError(f"the chat template produced {len(pieces) - 1} image slots for {len(images)} images")
        pixel_values = grid = None
        keys: tuple[bytes, ...] = ()
        if images:
            done = [self._preprocess(im) for im in images]
            pixel_values = torch.cat([d[0] for d in done]) if len(done) > 1 else done[0][0]
            grid = torch.cat([d[1] for d in done])
            keys = tuple(d[2] for d in done)
        ids: list[int] = []
        types: list[int] = []
        for i, piece in enumerate(pieces):
            if piece:
                t = self.tokenizer.encode(piece, add_special_tokens=False)
                ids += t
                types += [0] * len(t)
            if i < len(images):
                n = int(grid[i].prod()) // (self.merge ** 2)
                ids += [self.image_token_id] * n
                types += [1] * n
        return Encoded(ids, types, pixel_values, grid, keys)

    def _preprocess(self, image: Any) -> tuple[torch.Tensor, torch.Tensor, bytes]:
        """One image's patches, grid and content digest (Qwen-VL concatenates images' patches, so
        per-image is exact)."""
        key = bytes(image) if isinstance(image, (bytes, bytearray)) and self._image_cache_bytes else None
        if key is not None and key in self._image_cache:
            self._image_cache.move_to_end(key)
            return self._image_cache[key]
        out = self.image_processor(images=[to_pil(image)], return_tensors="pt")
        pv, grid = out["pixel_values"], out["image_grid_thw"]
        digest = content_digest(key) if key is not None else patches_digest(pv, grid)
        hit = (pv, grid, digest)
        if key is not None:
            size = hit[0].numel() * hit[0].element_size()
            self._image_cache[key] = hit
            self._image_cache_used += size
            while self._image_cache_used > self._image_cache_bytes and self._image_cache:
                _, (pv, _, _) = self._image_cache.popitem(last=False)
                self._image_cache_used -= pv.numel() * pv.element_size()
        return hit


def content_digest(data: bytes) -> bytes:
    """A 16-byte content digest (what the image and vision-feature caches are keyed by)."""
    return hashlib.blake2b(data, digest_size=16).digest()


def patches_digest(pixel_values: torch.Tensor, grid: torch.Tensor) -> bytes:
    """A digest of preprocessed patches (an image that came without its encoded bytes)."""
    return content_digest(grid.numpy().tobytes() + pixel_values.detach().cpu().contiguous().numpy().tobytes())
