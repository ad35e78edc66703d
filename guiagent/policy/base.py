"""The policy interface: a batch of multimodal chats in, generations out.

Chat format (the Hugging Face / Qwen message style, plain dicts typed below)::

    chat = [
        {"role": "system", "content": "You control a phone."},            # str content is allowed
        {"role": "user", "content": [
            {"type": "image", "image": png_bytes},                         # PNG/JPEG bytes or a PIL image
            {"type": "text", "text": "Goal: open the settings."},
        ]},
    ]

``role`` is ``system``, ``user`` or ``assistant``. ``content`` is a string or a
list of parts; a part is ``{"type": "text", "text": str}`` or
``{"type": "image", "image": bytes | PIL.Image.Image}``. Images are passed at
their captured size; each backend resizes them within its pixel limits.
:func:`check_chat` validates a chat and raises :class:`ChatError` saying what is
wrong.

Log-probs are those of the model's own distribution (temperature 1, no top-p),
whatever the sampling settings were: the numbers a trainer's teacher-forced
scoring reproduces, so PPO ratios start at exactly 1.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, Sequence, TypedDict, Union, runtime_checkable

from PIL import Image

if TYPE_CHECKING:
    import torch

__all__ = [
    "TextPart", "ImagePart", "Message", "Chat", "ChatError", "BackendError", "SamplingParams",
    "Generation", "ScoreBatch", "Policy", "TrainablePolicy", "check_chat", "text_part", "image_part",
    "message", "chat_images", "to_pil", "to_png", "turn_seed",
]


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class ImagePart(TypedDict):
    type: Literal["image"]
    image: "bytes | Image.Image"


class Message(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: Union[str, list[Union[TextPart, ImagePart]]]


Chat = list[Message]


class ChatError(ValueError):
    """A chat is malformed; the message names the message and part index."""


class BackendError(RuntimeError):
    """A backend could not produce a generation (server down after retries, timeouts, ...)."""


def text_part(text: str) -> TextPart:
    return {"type": "text", "text": text}


def image_part(image: "bytes | Image.Image") -> ImagePart:
    return {"type": "image", "image": image}


def message(role: str, *parts: "str | bytes | Image.Image | TextPart | ImagePart") -> Message:
    """Build a message; str -> text part, bytes/PIL -> image part."""
    content: list[Any] = []
    for p in parts:
        if isinstance(p, str):
            content.append(text_part(p))
        elif isinstance(p, dict):
            content.append(p)
        else:
            content.append(image_part(p))
    return {"role": role, "content": content}  # type: ignore[typeddict-item]


def check_chat(chat: Any) -> None:
    """Raise :class:`ChatError` unless ``chat`` follows the format in the module docstring."""
    if not isinstance(chat, (list, tuple)) or not chat:
        raise ChatError(f"a chat is a non-empty list of messages, got {type(chat).__name__}")
    for i, m in enumerate(chat):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise ChatError(f"message {i}: needs role system|user|assistant, got {m!r:.80}")
        content = m.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, (list, tuple)):
            raise ChatError(f"message {i}: content must be a string or a list of parts")
        for j, p in enumerate(content):
            kind = p.get("type") if isinstance(p, dict) else None
            if kind == "text" and isinstance(p.get("text"), str):
                continue
            if kind == "image" and _is_image(p.get("image")):
                continue
            raise ChatError(f"message {i} part {j}: expected {{'type': 'text', 'text': str}} or "
                            f"{{'type': 'image', 'image': bytes | PIL.Image}}, got {p!r:.80}")


def _is_image(x: Any) -> bool:
    if isinstance(x, (bytes, bytearray)):
        return True
    return isinstance(x, Image.Image)


def chat_images(chat: Chat) -> list[Any]:
    """The images of a chat, in order of appearance."""
    return [p["image"] for m in chat if not isinstance(m["content"], str)
            for p in m["content"] if p["type"] == "image"]  # type: ignore[index, typeddict-item]


def to_pil(image: "bytes | Image.Image") -> "Image.Image":
    """Decode bytes to an RGB PIL image (PIL images pass through, converted to RGB)."""
    if isinstance(image, (bytes, bytearray)):
        image = Image.open(io.BytesIO(image))
        image.load()
    return image if image.mode == "RGB" else image.convert("RGB")


def to_png(image: "bytes | Image.Image") -> bytes:
    """PNG/JPEG bytes pass through unchanged; PIL images are encoded as PNG."""
    if isinstance(image, (bytes, bytearray)):
        return bytes(image)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature=0`` is greedy; ``seed`` makes sampling reproducible.

    ``seeds``: one seed per chat of the batch. Each chat then samples from its own random
    stream, so its reply depends on its seed and its prompt only — not on which other chats
    share the batch, in which order, nor on the process's global random state (the rollout
    driver derives them from the episode and the turn; see :func:`turn_seed`).
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    min_p: float = 0.0
    """drop tokens less likely than min_p x the most likely one (0: off): cuts the tail where the
    model is sure (format tokens) and keeps the alternatives where it is not (coordinates)"""
    seed: int | None = None
    stop: tuple[str, ...] = ()
    seeds: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if not (0.0 <= self.min_p < 1.0):
            raise ValueError(f"min_p must lie in [0, 1), got {self.min_p}")
        if isinstance(self.stop, str):
            raise ValueError("stop must be a tuple of strings, e.g. stop=('</tool_call>',)")
        if self.seeds is not None and not all(isinstance(x, int) and 0 <= x < 2**63 for x in self.seeds):
            raise ValueError("seeds must be integers in [0, 2**63)")

    def for_rows(self, n: int) -> "tuple[int, ...] | None":
        """The per-chat seeds for a batch of ``n`` chats (None: no per-chat seeds)."""
        if self.seeds is None:
            return None
        if len(self.seeds) != n:
            raise ValueError(f"{len(self.seeds)} seeds for a batch of {n} chats")
        return tuple(self.seeds)


def turn_seed(base: int, key: str, turn: int) -> int:
    """A 63-bit seed for one turn of one episode: stable across processes and Python versions
    (``hash()`` is salted per process, so it is not used)."""
    digest = hashlib.blake2b(f"{base}|{key}|{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass(frozen=True)
class Generation:
    """One sampled completion.

    ``token_ids`` and ``logprobs`` have the same length (empty when a server gives
    neither); the end-of-turn token is included when the model emitted it.
    ``finish_reason`` is ``stop`` (end of turn or a stop string) or ``length``.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    prompt_tokens: int = 0
    finish_reason: Literal["stop", "length"] = "stop"
    policy_version: int = 0

    def __post_init__(self) -> None:
        if self.token_ids and self.logprobs and len(self.token_ids) != len(self.logprobs):
            raise ValueError("token_ids and logprobs must have the same length")

    @property
    def logprob(self) -> float:
        """Sum of the token log-probs."""
        return float(sum(self.logprobs))


@dataclass(frozen=True)
class ScoreBatch:
    """Teacher-forced log-probs of given completions, padded to one tensor.

    ``logprobs``: float ``[B, T]`` (differentiable when asked for), ``mask``: bool
    ``[B, T]``, true on real completion tokens; ``T`` is the longest completion. ``extra``: what
    else the scoring was asked for (``"entropy"``: ``[B, T]``, nats, zeros off the mask).
    """

    logprobs: "torch.Tensor"
    mask: "torch.Tensor"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_lists(self) -> list[list[float]]:
        return [row[m].tolist() for row, m in zip(self.logprobs.detach().float().cpu(), self.mask.cpu())]


@runtime_checkable
class Policy(Protocol):
    """Anything that turns chats into generations."""

    #: bumped each time the weights change, stored with every step
    version: int

    def generate(self, chats: Sequence[Chat], sampling: SamplingParams = SamplingParams()) -> list[Generation]:
        """One generation per chat, in order."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class TrainablePolicy(Policy, Protocol):
    """A policy whose weights live in this process and can be scored and trained."""

    def score(self, chats: Sequence[Chat], completions: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per-token log-probs of the given completion token ids (no grad)."""
        ...

    def score_batch(self, chats: Sequence[Chat], completions: Sequence[Sequence[int]], *,
                    grad: bool = True, entropy: bool = False) -> ScoreBatch:
        """As :meth:`score`, as a padded tensor batch; differentiable when ``grad``; with ``entropy``
        also each completion token's next-token entropy, in ``extra["entropy"]``."""
        ...

    def encode_completion(self, text: str, *, end_turn: bool = True) -> list[int]:
        """Token ids of an assistant reply (SFT targets), with the end-of-turn token."""
        ...

    def parameters(self) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def mark_updated(self) -> int:
        """Call after changing weights in place (an optimiser step); returns the new version."""
        ...

    def save(self, path: str) -> None: ...
