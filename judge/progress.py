"""Progress rewards from task milestones, as potential-based shaping.

A task reports its ordered milestones after every step (``Task.milestones``). The
potential of a state is the fraction of milestones reached,

    Φ(s) = (1/M) Σ_i m_i(s)              (or the reached *prefix*, with ``ordered=True``)

and the shaping reward of a transition s → s' is

    F(s, s') = γ Φ(s') − Φ(s)            (Ng, Harada & Russell, 1999)

The potential of the state an episode *ends* in is 0 — whether the episode
terminated (the task ended, the agent finished) or was truncated (the step
budget ran out). The shaping terms then telescope,

    Σ_t γ^t F(s_t, s_{t+1}) = γ^T · 0 − Φ(s_0) = −Φ(s_0),

to the same value for every episode from the same start state, so shaping moves
reward earlier without changing any episode's return by more than a constant:
the ranking of policies, and hence the optimum, is unchanged. Keeping the last
potential of a truncated episode would pay an agent for reaching milestones and
then running out of steps instead of finishing — an exploit, not a hint.

A learner that bootstraps a cut-off episode's return with a critic
(``G = Σ r + γ^T V(s_T)``) is the one exception: the shaped value is
``V(s) − Φ(s)``, so it passes ``bootstrap_potential = Φ(s_T)`` and the shaping
and the shaped bootstrap again telescope to −Φ(s_0). Monte-Carlo learners (GRPO
and its family) leave it at ``None``.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["potential", "shaping_rewards"]


def potential(milestones: Sequence[bool], *, ordered: bool = False) -> float:
    """Φ in [0, 1]: fraction of milestones reached (``ordered``: the reached prefix only)."""
    if not milestones:
        return 0.0
    if ordered:
        n = 0
        for m in milestones:
            if not m:
                break
            n += 1
        return n / len(milestones)
    return sum(bool(m) for m in milestones) / len(milestones)


def shaping_rewards(milestones_per_state: Sequence[Sequence[bool]], *, gamma: float = 1.0,
                    bootstrap_potential: float | None = None, ordered: bool = False) -> list[float]:
    """Per-step shaping ``F_t = γ Φ(s_{t+1}) − Φ(s_t)`` of one whole episode.

    ``milestones_per_state`` holds T+1 entries: the state after reset, then the
    state after each of the T steps. The last state's potential is 0 (the episode
    ended there, terminated or truncated) unless ``bootstrap_potential`` gives the
    potential a critic's bootstrap of a cut-off episode includes (see the module doc).

    >>> shaping_rewards([[False, False], [True, False], [True, True]])
    [0.5, -0.5]
    >>> sum(shaping_rewards([[True, False], [True, True]]))   # −Φ(s_0), whatever happened in between
    -0.5
    """
    if len(milestones_per_state) < 1:
        raise ValueError("need at least the initial state's milestones")
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    phis = [potential(m, ordered=ordered) for m in milestones_per_state]
    if len(phis) > 1:  # an episode with no steps has no transition to shape
        phis[-1] = 0.0 if bootstrap_potential is None else float(bootstrap_potential)
    return [gamma * phis[t + 1] - phis[t] for t in range(len(phis) - 1)]
