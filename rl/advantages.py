"""Advantage estimators: pure functions over tensors.

Shapes: ``N`` samples (episodes or turns), ``B`` sequences, ``T`` steps. Groups are
given as integer ids (``group_ids[i]`` = the group of sample ``i``), so groups may
differ in size (e.g. after an aborted episode was dropped).

References: GRPO (Shao et al., 2024, DeepSeekMath), Dr. GRPO (Liu et al., 2025,
"Understanding R1-Zero-like training"), DAPO's dynamic sampling (Yu et al., 2025),
GAE (Schulman et al., 2016), AWR (Peng et al., 2019), UI-S1's semi-online
step + episode advantages (Lu et al., 2025), GiGPO's anchor-state step groups (Feng et
al., 2025, "Group-in-Group Policy Optimization for LLM Agent Training"), Dr. MAS's
per-agent (here: per-task) normalisation, AEM's response-level entropy modulation
(Zhao et al., 2026).
"""

from __future__ import annotations

import torch

from rl.settings import SemiOnlineRewardConfig  # (a setting: defined there, torch-free, for rl.config)

__all__ = [
    "group_stats", "grpo_advantages", "nonzero_variance_mask", "discounted_returns", "gae",
    "step_group_advantages", "semi_online_advantages",
    "SemiOnlineRewardConfig", "semi_online_step_rewards", "semi_online_returns", "scale_negative_advantages",
    "awr_weights", "anchor_groups", "tolerant_anchor_groups", "gigpo_advantages", "normalize_per_key",
    "whiten", "aem_modulation",
]


def group_stats(values: torch.Tensor, group_ids: torch.Tensor, *, unbiased: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group mean, std and size.

    Args:
        values: ``[N]`` float.
        group_ids: ``[N]`` long, any integers.
        unbiased: Bessel-corrected std (as ``torch.std``); a group of one has std 0.
    Returns:
        ``(mean [N], std [N], count [N])``, each sample's own group's statistics.
    """
    if values.shape != group_ids.shape or values.dim() != 1:
        raise ValueError(f"values and group_ids must both be [N]; got {tuple(values.shape)} and {tuple(group_ids.shape)}")
    _, inv = torch.unique(group_ids, return_inverse=True)
    g = int(inv.max().item()) + 1 if inv.numel() else 0
    v = values.to(torch.float64)
    count = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, torch.ones_like(v))
    total = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, v)
    mean = total / count
    sq = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, (v - mean[inv]) ** 2)
    denom = (count - 1).clamp(min=1) if unbiased else count
    std = torch.sqrt(sq / denom)
    return mean[inv].to(values.dtype), std[inv].to(values.dtype), count[inv].to(values.dtype)


def grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, *, normalize_std: bool = True,
                    eps: float = 1e-6, unbiased: bool = True) -> torch.Tensor:
    """Group-relative advantages ``A_i = (r_i − mean_g) / (std_g + ε)``.

    ``normalize_std=False`` gives Dr. GRPO's ``A_i = r_i − mean_g`` (no std
    normalisation, which biases towards too-easy and too-hard groups).

    Args:
        rewards: ``[N]`` episode rewards.
        group_ids: ``[N]`` group of each sample (same task and seed).
    Returns:
        ``[N]`` advantages; a zero-variance group gets all zeros.

    >>> grpo_advantages(torch.tensor([1., 0., 0., 1.]), torch.tensor([0, 0, 1, 1]), normalize_std=False)
    tensor([ 0.5000, -0.5000, -0.5000,  0.5000])
    """
    mean, std, _ = group_stats(rewards, group_ids, unbiased=unbiased)
    adv = rewards - mean
    if normalize_std:
        adv = adv / (std + eps)
    return adv


def nonzero_variance_mask(rewards: torch.Tensor, group_ids: torch.Tensor, *, tol: float = 1e-8) -> torch.Tensor:
    """``[N]`` bool: True where the sample's group has reward variance (DAPO's dynamic sampling keeps these).

    A group whose samples all got the same reward carries no GRPO signal.
    """
    _, std, _ = group_stats(rewards, group_ids, unbiased=False)
    return std > tol


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor | None = None, *, gamma: float = 1.0
                       ) -> torch.Tensor:
    """Step-level discounted returns ``G_t = Σ_{k≥t} γ^{k−t} r_k`` within each episode.

    Args:
        rewards: ``[B, T]`` per-step rewards, right-padded.
        mask: ``[B, T]`` 1 for real steps, 0 for padding (padding rewards are ignored).
    Returns:
        ``[B, T]`` returns (0 on padding).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, T], got {tuple(rewards.shape)}")
    m = torch.ones_like(rewards) if mask is None else mask.to(rewards.dtype)
    r = rewards * m
    out = torch.zeros_like(r)
    running = torch.zeros(r.shape[0], dtype=r.dtype, device=r.device)
    for t in range(r.shape[1] - 1, -1, -1):
        running = r[:, t] + gamma * running * m[:, t]
        out[:, t] = running
    return out * m


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float = 1.0,
        lam: float = 0.95, last_values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn-level generalised advantage estimation with a critic.

    ``δ_t = r_t + γ V(s_{t+1}) − V(s_t)``, ``A_t = Σ_k (γλ)^k δ_{t+k}``.

    Args:
        rewards: ``[B, T]`` per-turn rewards, right-padded.
        values: ``[B, T]`` critic values ``V(s_t)``.
        mask: ``[B, T]`` 1 for real turns.
        last_values: ``[B]`` bootstrap ``V(s_T)`` after the last real turn, for
            truncated episodes (0, the default, for terminated ones).
    Returns:
        ``(advantages [B, T], returns [B, T])`` with ``returns = advantages + values``;
        both 0 on padding.
    """
    B, T = rewards.shape
    m = mask.to(rewards.dtype)
    boot = torch.zeros(B, dtype=rewards.dtype) if last_values is None else last_values.to(rewards.dtype)
    adv = torch.zeros_like(rewards)
    next_adv = torch.zeros(B, dtype=rewards.dtype)
    next_value = boot.clone()
    for t in range(T - 1, -1, -1):
        # Past the episode's end (padding), carry the bootstrap value to the last real step.
        is_real = m[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a = delta + gamma * lam * next_adv
        adv[:, t] = a * is_real
        next_adv = torch.where(is_real > 0, a, next_adv)
        next_value = torch.where(is_real > 0, values[:, t], next_value)
    return adv, (adv + values) * m


def step_group_advantages(returns: torch.Tensor, group_ids: torch.Tensor, step_index: torch.Tensor, *,
                          normalize_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Step-level group advantages: normalise each step's discounted return within its
    (group, step index) cohort, as in UI-S1's step-level advantage.

    Args:
        returns: ``[N]`` discounted return of each turn.
        group_ids: ``[N]`` episode group of each turn.
        step_index: ``[N]`` turn index within its episode.
    Returns:
        ``[N]``.
    """
    # one id per (group, step) pair, whatever their ranges
    _, key = torch.unique(torch.stack([group_ids.to(torch.int64), step_index.to(torch.int64)], 1), dim=0,
                          return_inverse=True)
    return grpo_advantages(returns, key, normalize_std=normalize_std, eps=eps)


def semi_online_step_rewards(format_ok: torch.Tensor, kind_match: torch.Tensor, matched: torch.Tensor,
                             config: SemiOnlineRewardConfig = SemiOnlineRewardConfig(), *,
                             distance: torch.Tensor | None = None) -> torch.Tensor:
    """Per-step rewards from format validity, kind match and match (any equal shapes, bool).

    ``distance``: the point actions' normalised distance to their target (NaN where the
    step has none); used when ``config.point_sigma > 0``.

    >>> semi_online_step_rewards(torch.tensor([1, 1, 1, 0]).bool(), torch.tensor([1, 1, 0, 0]).bool(),
    ...                          torch.tensor([1, 0, 0, 0]).bool())
    tensor([1.0000, 0.5500, 0.1900, 0.0000])
    >>> semi_online_step_rewards(torch.tensor([1, 1]).bool(), torch.tensor([1, 1]).bool(),
    ...                          torch.tensor([0, 0]).bool(), SemiOnlineRewardConfig(point_sigma=0.1),
    ...                          distance=torch.tensor([0.1, float("nan")]))
    tensor([0.8229, 0.5500])
    """
    c = config
    f, k, m = format_ok.bool(), kind_match.bool(), matched.bool()
    kind = torch.full(f.shape, c.kind_score)
    if c.point_sigma > 0 and distance is not None:
        d = distance.to(torch.float32)
        near = torch.exp(-d.square() / (2 * c.point_sigma ** 2))
        kind = torch.where(torch.isnan(d), kind, c.kind_score + (c.match_score - c.kind_score) * near)
    score = torch.where(m & k, torch.tensor(c.match_score),
                        torch.where(k, kind,
                                    torch.where(f, torch.tensor(c.parsed_score), torch.tensor(0.0))))
    return c.format_weight * f.to(score.dtype) + c.action_weight * score


def semi_online_returns(rewards: torch.Tensor, matched: torch.Tensor, mask: torch.Tensor | None = None, *,
                        gamma: float = 0.5) -> torch.Tensor:
    """Discounted returns that stop accumulating at mismatches (UI-S1).

    Backwards over each episode: at a matched step ``G_t = r_t + γ C_{t+1}``; at a
    mismatched step ``G_t = r_t`` and ``C_t = 0``, else ``C_t = G_t``: no reward at or
    after a mismatch flows back past it (the reference code's
    ``compute_step_discounted_returns``).

    Args:
        rewards: ``[B, T]`` per-step rewards, right-padded.
        matched: ``[B, T]`` bool, the step's action matched the recorded one.
        mask: ``[B, T]`` 1 for real steps (padding gets 0).
    Returns:
        ``[B, T]``.
    """
    if rewards.dim() != 2 or matched.shape != rewards.shape:
        raise ValueError(f"rewards and matched must both be [B, T]; got {tuple(rewards.shape)}, "
                         f"{tuple(matched.shape)}")
    m = torch.ones_like(rewards) if mask is None else mask.to(rewards.dtype)
    keep = matched.to(rewards.dtype) * m
    out = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    for t in range(rewards.shape[1] - 1, -1, -1):
        r = rewards[:, t] * m[:, t]
        out[:, t] = r + gamma * running * keep[:, t]
        running = out[:, t] * keep[:, t]  # a mismatch (or padding) cuts the chain for earlier steps
    return out * m


def semi_online_advantages(step_returns: torch.Tensor, episode_rewards: torch.Tensor, group_ids: torch.Tensor,
                           step_index: torch.Tensor, *, step_weight: float = 1.0, episode_weight: float = 1.0,
                           normalize_std: bool = True, eps: float = 1e-6,
                           turn_episode: torch.Tensor | None = None) -> torch.Tensor:
    """UI-S1's dual-level advantage ``A = w_E · A^E + w_S · A^S``.

    ``A^E``: the episode's total reward normalised within its group (the G samples of
    one recorded episode); ``A^S``: the turn's return (:func:`semi_online_returns`)
    normalised within its (group, recorded step) cohort: the samples that acted at
    the same recorded screen. ``normalize_std=False`` subtracts the mean only (the
    reference code's ``mean_norm`` mode).

    With ``turn_episode`` (each turn's episode, any integers) every episode counts once in
    its group's mean and std, as the paper defines ``A^E``; without it every turn counts, so
    an episode weighs as many times as it has turns (the statistics of UI-S1's code with
    ``compute_mean_std_cross_all_data``, over episode totals).

    Args:
        step_returns: ``[N]`` the turn's discounted return.
        episode_rewards: ``[N]`` the total reward of the turn's episode.
        group_ids, step_index: ``[N]`` as in :func:`step_group_advantages`.
        turn_episode: ``[N]`` the turn's episode; its turns must share a group and a total.
    Returns:
        ``[N]``.
    """
    if turn_episode is None:
        a_ep = grpo_advantages(episode_rewards, group_ids, normalize_std=normalize_std, eps=eps)
    else:
        te = turn_episode.to(torch.int64)
        if te.shape != episode_rewards.shape:
            raise ValueError(f"turn_episode must be [N] like episode_rewards; got {tuple(te.shape)}")
        _, inv = torch.unique(te, return_inverse=True)
        first = torch.full((int(inv.max()) + 1 if inv.numel() else 0,), te.numel(), dtype=torch.int64)
        first = first.scatter_reduce(0, inv, torch.arange(te.numel()), reduce="amin")
        if not (torch.equal(group_ids[first][inv], group_ids)
                and torch.equal(episode_rewards[first][inv], episode_rewards)):
            raise ValueError("the turns of one episode must share its group and its total reward")
        a_ep = grpo_advantages(episode_rewards[first], group_ids[first], normalize_std=normalize_std, eps=eps)[inv]
    a_step = step_group_advantages(step_returns, group_ids, step_index, normalize_std=normalize_std, eps=eps)
    return episode_weight * a_ep + step_weight * a_step


def scale_negative_advantages(adv: torch.Tensor, success_rate: torch.Tensor | float, *,
                              min_scale: float = 0.1) -> torch.Tensor:
    """Success-adaptive down-weighting of negative advantages.

    When a task is rarely solved, nearly every sample is pushed down, which mostly
    spreads probability onto other unrewarded actions; negative advantages are
    scaled by ``s = min_scale + (1 − min_scale) · p`` where ``p`` is the success
    rate (per sample, e.g. its group's, or one float). Positive ones are unchanged.

    Args:
        adv: ``[N]``.
        success_rate: ``[N]`` or a float in [0, 1].
    """
    p = torch.as_tensor(success_rate, dtype=adv.dtype).clamp(0.0, 1.0)
    scale = min_scale + (1.0 - min_scale) * p
    return torch.where(adv < 0, adv * scale, adv)


def awr_weights(adv: torch.Tensor, *, beta: float = 1.0, max_weight: float = 20.0) -> torch.Tensor:
    """Advantage-weighted regression weights ``w = min(exp(A/β), w_max)``."""
    return torch.exp(adv / beta).clamp(max=max_weight)


def anchor_groups(state_ids: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """GiGPO's anchor-state step groups: the turns of one episode group that acted on the same state.

    Two turns share a step group when they belong to the same episode group (same task and
    seed) and their states are equal (``state_ids`` equal: e.g. the content hash of the
    screenshot, which the store already uses as the blob name), whatever their step index.

    Args:
        state_ids: ``[N]`` long, one id per distinct state.
        group_ids: ``[N]`` long, the episode group of each turn.
    Returns:
        ``[N]`` long step-group ids (0..K-1, in order of first appearance).

    >>> anchor_groups(torch.tensor([5, 6, 5, 5]), torch.tensor([0, 0, 0, 1]))
    tensor([0, 1, 0, 2])
    """
    if state_ids.shape != group_ids.shape or state_ids.dim() != 1:
        raise ValueError(f"state_ids and group_ids must both be [N]; got {tuple(state_ids.shape)}, "
                         f"{tuple(group_ids.shape)}")
    seen: dict[tuple[int, int], int] = {}
    out = [seen.setdefault((int(g), int(s)), len(seen)) for g, s in zip(group_ids.tolist(), state_ids.tolist())]
    return torch.tensor(out, dtype=torch.long)


def tolerant_anchor_groups(thumbs: torch.Tensor, group_ids: torch.Tensor, *, tol: float = 0.01,
                           pixel_delta: float = 0.06) -> torch.Tensor:
    """Anchor-state step groups that also join screens differing only in a few pixels (a clock,
    a blinking cursor): GiGPO's similarity grouping, for images.

    Within each episode group, turns are taken in order; a turn joins the first cluster whose
    representative (its first member) differs from it in at most ``tol`` of the pixels, a
    pixel differing when ``|a − b| > pixel_delta``; else it starts a new cluster.

    Args:
        thumbs: ``[N, H, W]`` float in [0, 1], small grey thumbnails of the screens.
        group_ids: ``[N]`` long.
        tol: largest share of differing pixels for two screens to be the same state.
    Returns:
        ``[N]`` long step-group ids.
    """
    if thumbs.dim() != 3 or thumbs.shape[0] != group_ids.shape[0]:
        raise ValueError(f"thumbs must be [N, H, W] with N = len(group_ids); got {tuple(thumbs.shape)}")
    out = torch.empty(thumbs.shape[0], dtype=torch.long)
    reps: dict[int, list[tuple[int, int]]] = {}  # episode group -> [(representative row, cluster id)]
    k = 0
    for i, g in enumerate(group_ids.tolist()):
        for row, cid in reps.setdefault(g, []):
            if float(((thumbs[i] - thumbs[row]).abs() > pixel_delta).float().mean()) <= tol:
                out[i] = cid
                break
        else:
            reps[g].append((i, k))
            out[i] = k
            k += 1
    return out


def gigpo_advantages(episode_rewards: torch.Tensor, episode_groups: torch.Tensor, turn_episode: torch.Tensor,
                     step_returns: torch.Tensor, step_groups: torch.Tensor, *, step_weight: float = 1.0,
                     normalize_std: bool = False, eps: float = 1e-6) -> torch.Tensor:
    """GiGPO's group-in-group advantage ``A = A^E + ω · A^S`` per turn.

    ``A^E``: the episode's total reward normalised within its episode group (GRPO, each
    episode counted once); ``A^S``: the turn's discounted return normalised within its
    anchor-state step group (:func:`anchor_groups`): the turns, of any episode of the group,
    that acted on the same screen. A step group of one turn has ``A^S = 0``.
    ``normalize_std=False`` is the reference implementation's default (``mean_norm``:
    subtract the mean only).

    Args:
        episode_rewards: ``[E]`` total reward of each episode.
        episode_groups: ``[E]`` episode group of each episode.
        turn_episode: ``[N]`` long, the episode (0..E-1) of each turn.
        step_returns: ``[N]`` the turn's discounted return ``Σ_k γ^k r_{t+k}``.
        step_groups: ``[N]`` anchor-state step group of each turn.
    Returns:
        ``[N]``.
    """
    a_ep = grpo_advantages(episode_rewards, episode_groups, normalize_std=normalize_std, eps=eps)
    a_step = grpo_advantages(step_returns, step_groups, normalize_std=normalize_std, eps=eps)
    return a_ep[turn_episode].to(a_step.dtype) + step_weight * a_step


def normalize_per_key(adv: torch.Tensor, keys: torch.Tensor, *, center: bool = True, eps: float = 1e-6
                      ) -> torch.Tensor:
    """Advantages normalised by the statistics of their own key (Dr. MAS: per agent; here per task).

    ``A'_i = (A_i − μ_k) / (σ_k + ε)`` with ``μ_k, σ_k`` over the samples of ``i``'s key
    (``center=False``: ``A_i / (σ_k + ε)``, a rescaling that keeps signs). In a multi-task
    batch, tasks whose rewards spread widely no longer drown the others' gradients.

    >>> normalize_per_key(torch.tensor([2., 0., 0.2, 0.]), torch.tensor([0, 0, 1, 1]), eps=0.0)
    tensor([ 0.7071, -0.7071,  0.7071, -0.7071])
    """
    mean, std, _ = group_stats(adv, keys)
    return ((adv - mean) if center else adv) / (std + eps)


def whiten(adv: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """Batch whitening ``(A − mean) / (std + ε)`` (PPO's usual advantage normalisation)."""
    if adv.numel() < 2:
        return adv - adv.mean() if adv.numel() else adv
    return (adv - adv.mean()) / (adv.std() + eps)


def aem_modulation(adv: torch.Tensor, surprisal: torch.Tensor, group_ids: torch.Tensor, *, alpha: float = 0.5,
                   max_scale: float = 2.0) -> torch.Tensor:
    """Response-level entropy modulation of advantages (after AEM).

    The entropy change an update causes is driven by the product of a response's advantage
    and its *relative response surprisal* ``u_i = (s_i − mean_g s) / (std_g s + ε)``, with
    ``s_i`` the response's mean per-token negative log-likelihood (response level, not token
    level: one number per reply, which is what the environment acts on), standardised
    within its group. ``A'_i = A_i · clamp(1 + α · sign(A_i) · u_i, 1/max_scale, max_scale)``:

    * ``α > 0`` strengthens the updates that raise entropy and weakens those that lower it: a
      surprising good reply is rewarded more and a confident bad one punished more (probability
      moves towards rare tokens and away from confident mistakes), while a confident good reply is
      rewarded and a surprising bad one punished more gently: exploration;
    * ``α < 0`` the other way round (confident good replies and surprising bad ones weigh more):
      exploitation;
    * ``α = 0`` leaves the advantages unchanged.

    The sign of every advantage is kept. A schedule of ``α`` from positive to negative gives
    the paper's exploration-to-exploitation transition. Two good replies and two bad ones, each
    pair one confident and one surprising, at a large ``α`` (the scales clamped to 1/2 and 2)::

        >>> adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
        >>> surprisal = torch.tensor([1.0, 3.0, 1.0, 3.0])  # confident, surprising, confident, surprising
        >>> aem_modulation(adv, surprisal, torch.zeros(4, dtype=torch.long), alpha=5.0).tolist()
        [0.5, 2.0, -2.0, -0.5]
        >>> aem_modulation(adv, surprisal, torch.zeros(4, dtype=torch.long), alpha=-5.0).tolist()
        [2.0, 0.5, -0.5, -2.0]

    Args:
        adv: ``[N]``; surprisal: ``[N]`` mean token NLL of each reply; group_ids: ``[N]``.
    Returns:
        ``[N]``.
    """
    if max_scale < 1.0:
        raise ValueError(f"max_scale must be >= 1, got {max_scale}")
    u = normalize_per_key(surprisal.to(adv.dtype), group_ids)
    scale = (1.0 + alpha * torch.sign(adv) * u).clamp(1.0 / max_scale, max_scale)
    return adv * scale
