"""A turn-level critic: a small value head on the policy's hidden state.

``V(s_t)`` predicts the return of turn ``t`` from what the policy saw at that turn: the goal,
the screenshot and the history, as the policy's last-layer hidden state at the last prompt
token (the position from which the reply is generated). The state is read without gradient,
so the critic never changes the policy's representation (VL-DAC's separation of the actor's
and the critic's losses); the head is a LayerNorm + two-layer MLP, cheap enough to fit over
several epochs each iteration on cached features.

Features are computed once per iteration, before the update. By default
(``--critic-features start``) they come from the frozen starting model, not from the learner:
a head fitted on one iteration's features then reads the next iteration's in the same space,
where the learner's own hidden states move under it with every update (by how much:
docs/results.md, "The critic's fit"). The head is
fitted on them after the policy's update with the clipped value loss
(:func:`rl.losses.value_loss`). Only the head's weights go into checkpoints
(``critic.safetensors``, read back as tensors only); its Adam state starts afresh on resume.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Sequence

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from rl.losses import value_loss

__all__ = ["ValueHead", "TurnCritic", "turn_features", "CRITIC_FILE"]

CRITIC_FILE = "critic.safetensors"


class ValueHead(nn.Module):
    """``[N, H]`` hidden states → ``[N]`` values."""

    def __init__(self, hidden: int, width: int = 128):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, width), nn.Tanh(), nn.Linear(width, 1))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.net(feats).squeeze(-1)


@torch.no_grad()
def turn_features(policy: Any, chats: Sequence[Any], *, micro_batch_size: int = 8) -> torch.Tensor:
    """``[N, H]`` float32: the policy's last-layer hidden state at each prompt's last token. A prompt
    is a chat or its encoding (``TrainTurn.inputs``: a rollout's turn is not encoded again).

    Prompts are left-padded by the policy's collation, so the last position is every row's
    last real token.
    """
    rows = []
    for i in range(0, len(chats), micro_batch_size):
        encs = [encoded(policy, c) for c in chats[i:i + micro_batch_size]]
        batch = policy._collate(encs)
        with policy._compute():
            out = policy.model(**batch, output_hidden_states=True, logits_to_keep=1, use_cache=False)
        rows.append(out.hidden_states[-1][:, -1].float().cpu())
    if not rows:
        return torch.zeros(0, 0)
    return torch.cat(rows)


def encoded(policy: Any, prompt: Any) -> Any:
    """``prompt`` as ``policy``'s model inputs: an encoding as it is, a chat encoded."""
    return prompt if hasattr(prompt, "input_ids") else policy.encoder.encode(prompt)


class TurnCritic:
    """The value head and its optimiser; built on first use (the hidden size comes from the features)."""

    def __init__(self, *, lr: float = 1e-3, epochs: int = 100, clip_eps: float | None = 0.5, width: int = 128,
                 batch_size: int = 64, seed: int = 0):
        self.lr, self.epochs, self.clip_eps, self.width, self.batch_size = lr, epochs, clip_eps, width, batch_size
        self.seed = seed
        self.head: ValueHead | None = None
        self.opt: torch.optim.Optimizer | None = None

    def _build(self, hidden: int) -> None:
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(self.seed)  # the head's initialisation does not shift the run's RNG stream
        self.head = ValueHead(hidden, self.width)
        torch.random.set_rng_state(gen_state)
        self.opt = torch.optim.Adam(self.head.parameters(), lr=self.lr)

    def features(self, policy: Any, chats: Sequence[Any], micro_batch_size: int = 8) -> torch.Tensor:
        """The head's inputs: ``policy``'s hidden states (an object with its own
        ``turn_features(chats, micro_batch_size)``, e.g. a LoRA learner's base, computes them itself)."""
        own = getattr(policy, "turn_features", None)
        if own is not None:
            return own(chats, micro_batch_size)
        return turn_features(policy, chats, micro_batch_size=micro_batch_size)

    @torch.no_grad()
    def values(self, feats: torch.Tensor) -> torch.Tensor:
        """``[N]`` values of ``[N, H]`` features."""
        if feats.numel() == 0:
            return torch.zeros(feats.shape[0])
        if self.head is None:
            self._build(feats.shape[-1])
        assert self.head is not None
        return self.head(feats)

    def fit(self, feats: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor) -> dict[str, float]:
        """Fit the head to ``returns`` (``[N]``) with the clipped value loss around ``old_values``:
        ``epochs`` shuffled passes in batches of ``batch_size``; returns the critic's metrics."""
        if feats.shape[0] == 0:
            return {}
        if self.head is None:
            self._build(feats.shape[-1])
        assert self.head is not None and self.opt is not None
        rng = random.Random(self.seed + int(feats.shape[0]))
        order = list(range(feats.shape[0]))
        losses = []
        for _ in range(self.epochs):
            rng.shuffle(order)
            for i in range(0, len(order), self.batch_size):
                idx = torch.tensor(order[i:i + self.batch_size])
                v = self.head(feats[idx])[None]
                loss = value_loss(v, old_values[idx][None].float(), returns[idx][None].float(),
                                  torch.ones_like(v), clip_eps=self.clip_eps)
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                self.opt.step()
                losses.append(float(loss.detach()))
        with torch.no_grad():
            after = self.head(feats)
        var = float(returns.float().var()) if returns.numel() > 1 else 0.0
        ev = 1.0 - float((returns.float() - after).var()) / var if var > 1e-12 else float("nan")
        return {"value_loss": sum(losses) / max(len(losses), 1), "value_mean": float(old_values.mean()),
                "explained_variance": ev}

    # ---- checkpoints: weights only -----------------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {} if self.head is None else {k: v.detach().clone() for k, v in self.head.state_dict().items()}

    def save(self, folder: Path) -> None:
        if self.head is not None:
            save_file(self.state_dict(), str(Path(folder) / CRITIC_FILE))

    def load(self, folder: Path) -> bool:
        """Restore the head from ``folder/critic.safetensors`` (False when the folder has none)."""
        path = Path(folder) / CRITIC_FILE
        if not path.is_file():
            return False
        state = load_file(str(path))
        w = state.get("net.1.weight")
        if w is None or w.dim() != 2:
            raise ValueError(f"{path} is not a value head (no net.1.weight)")
        self.width = int(w.shape[0])
        self._build(int(w.shape[1]))
        assert self.head is not None
        self.head.load_state_dict(state)
        return True
