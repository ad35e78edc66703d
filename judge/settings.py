"""The judge as a configured reward: :class:`JudgeSettings`, :func:`make_judge`, :class:`RewardJudge`.

A trainer nests :class:`JudgeSettings` in its config (``--judge.model URL
--judge.weight 0.5``), builds the judge once with :func:`make_judge` and hands it
to :func:`rl.rollout.run_rollout` (``judge=``): every finished episode is judged
before its last step is stored, the weighted score lands in that step's
``reward_parts["judge"]`` and ``reward``, and the verdict is stored as a judgement
beside the rule outcome. See docs/judge.md.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Sequence

from guiagent.policy import load_policy
from guiagent.types import Trajectory
from judge.vlm import JudgeConfig, Verdict, VLMJudge

__all__ = ["JudgeSettings", "RewardJudge", "make_judge", "judge_config", "TIMEOUT_PREFIX"]

#: the error text of a verdict the rollout stopped waiting for
TIMEOUT_PREFIX = "timeout"

_EVIDENCE_MODES = {"key_screens": "key_screens", "last_k": "last_k", "judge_picks": "evidence"}


@dataclass(frozen=True)
class JudgeSettings:
    """A VLM judge scoring each finished episode (off unless --judge.model is given)."""

    model: str | None = None
    """judge model: a local folder, a hub id, or an http(s):// OpenAI-compatible server URL
    (None: no judge)"""
    served_model: str = "auto"
    """the model name sent to an OpenAI-compatible server (its --served-model-name); auto: the one model
    the server lists at /v1/models (several listed: name one; none: "default")"""
    api_key_env: str = "OPENAI_API_KEY"
    """environment variable holding an OpenAI-compatible server's API key (sent as a Bearer token)"""
    mode: Literal["reward", "log"] = "reward"
    """reward: the weighted score joins the final step's reward; log: verdicts are stored and calibrated
    against the rule outcome, weight 0 (a trial run of a judge before trusting it)"""
    weight: float = 0.0
    """weight of the judge's score (in [0, 1]) in the reward; must be > 0 in reward mode"""
    votes: int = 1
    """verdict samples per episode, aggregated by --judge.aggregation (ZeroGUI votes; k > 1 needs
    --judge.temperature > 0)"""
    aggregation: Literal["majority", "mean"] = "majority"
    """majority: success when more than half the usable votes say so (score 1/0); mean: mean vote score"""
    temperature: float = 0.0
    """judge sampling temperature (0: greedy; votes > 1 need > 0)"""
    evidence: Literal["key_screens", "last_k", "judge_picks"] = "key_screens"
    """which screenshots the judge sees: key_screens (the last screens and the largest screen changes
    within --judge.token-budget), last_k (the last --judge.screens), judge_picks (a first text-only call
    picks the steps; two calls)"""
    screens: int = 3
    """most step screenshots shown, besides the final screen"""
    token_budget: int = 6000
    """key_screens: most visual tokens of one verdict call's screenshots (28x28 pixels a token)"""
    max_new_tokens: int = 256
    """longest judge answer, in tokens"""
    max_image_pixels: int = 1280 * 720
    """larger screenshots are downscaled to this many pixels before they are sent"""
    budget: int | None = None
    """most judge calls in the whole run (None: unlimited); past it verdicts are recorded missing"""
    rate_limit: float | None = None
    """most judge calls per second (None: no limit)"""
    timeout: float = 120.0
    """seconds to wait for one batch of verdicts (and for one HTTP request); past it the verdicts are
    recorded missing ('timeout') and the episodes keep their rule reward"""
    retries: int = 1
    """HTTP judge: retries of a failed request (429, 5xx, timeouts) before the verdict is missing"""
    workers: int = 2
    """judge batches in flight at once, beside the rollout (slots are refilled while judging)"""
    cache: bool = True
    """cache verdicts by content in <run>/judge_cache (a repeated trajectory costs no call)"""
    name: str = "vlm"
    """the judge's name in the store's judgements (the web UI's judge filter)"""

    def __post_init__(self) -> None:
        if self.model is not None and not str(self.model).strip():
            raise ValueError("--judge.model is empty: give a model folder, hub id or http(s) URL, "
                             "or leave it out")
        if self.mode not in ("reward", "log"):
            raise ValueError(f"--judge.mode must be 'reward' or 'log', got {self.mode!r}")
        if not 0.0 <= self.weight <= 10.0:
            raise ValueError(f"--judge.weight must lie in [0, 10], got {self.weight}")
        if self.model and self.mode == "reward" and self.weight == 0:
            raise ValueError("a judge model with --judge.weight 0 costs calls and changes no reward: set "
                             "--judge.weight (e.g. 0.5) to learn from its score, or --judge.mode log to only "
                             "record and calibrate its verdicts")
        if self.mode == "log" and self.weight != 0:
            raise ValueError("--judge.mode log records verdicts with weight 0: drop --judge.weight, or use "
                             "--judge.mode reward to learn from the judge")
        if not self.model and self.weight != 0:
            raise ValueError("--judge.weight is set but no --judge.model: name the judge model too")
        # each check names the one setting it refuses, by its flag (a command that takes these settings
        # under flags of its own, guiagent judge eval's --timeout, gets its own: guiagent.config)
        for flag, bad, rule in (
                ("--judge.timeout", not self.timeout > 0, "must be > 0 (seconds)"),
                ("--judge.retries", self.retries < 0, "must be >= 0"),
                ("--judge.workers", self.workers < 1, "must be >= 1"),
                ("--judge.votes", self.votes < 1, "must be >= 1"),
                ("--judge.temperature", not self.temperature >= 0, "must be >= 0 (0: greedy)"),
                ("--judge.screens", self.screens < 1, "must be >= 1"),
                ("--judge.token-budget", self.token_budget < 0, "must be >= 0"),
                ("--judge.max-new-tokens", self.max_new_tokens < 1, "must be >= 1"),
                ("--judge.max-image-pixels", self.max_image_pixels < 28 * 28, "must be at least 784 (28x28)"),
                ("--judge.budget", self.budget is not None and self.budget < 0, "must be >= 0 (unset: unlimited)")):
            if bad:
                value = getattr(self, flag.removeprefix("--judge.").replace("-", "_"))
                raise ValueError(f"{flag} {rule}, got {value}")
        if self.votes > 1 and self.temperature == 0:
            raise ValueError(f"--judge.votes {self.votes} at --judge.temperature 0 asks for {self.votes} identical "
                             "verdicts: set --judge.temperature > 0 (e.g. 0.7) or --judge.votes 1")
        if self.served_model != "auto":
            from guiagent.policy.openai_backend import check_model_name  # lazy: httpx, for servers only

            try:
                check_model_name(self.served_model)
            except ValueError as e:
                raise ValueError(f"--judge.served-model: {e}") from None
        # the judge's own checks, with their messages
        judge_config(self)

    @property
    def enabled(self) -> bool:
        return bool(self.model)

    @property
    def effective_weight(self) -> float:
        """The weight the rollout uses: 0 in log mode."""
        return self.weight if self.mode == "reward" else 0.0


def judge_config(settings: JudgeSettings, cache_dir: str | None = None) -> JudgeConfig:
    """The :class:`~judge.vlm.JudgeConfig` these settings describe."""
    try:
        return JudgeConfig(name=settings.name, mode=_EVIDENCE_MODES[settings.evidence],  # type: ignore[arg-type]
                           k=settings.screens, token_budget=settings.token_budget,
                           max_image_pixels=settings.max_image_pixels, temperature=settings.temperature,
                           max_new_tokens=settings.max_new_tokens,
                           votes=settings.votes, aggregation=settings.aggregation, budget=settings.budget,
                           rate_limit=settings.rate_limit, cache_dir=cache_dir,
                           model_id=_model_id(settings))
    except KeyError:
        raise ValueError(f"--judge.evidence must be one of {', '.join(_EVIDENCE_MODES)}, "
                         f"got {settings.evidence!r}") from None
    except ValueError as e:
        raise ValueError(f"judge settings: {e}") from None


def _model_id(settings: JudgeSettings) -> str:
    """The judge's id in verdicts and cache keys: a server's URL with the served model's name, else the model."""
    model = str(settings.model or "")
    if model.startswith(("http://", "https://")):
        return f"{model}#{settings.served_model}"
    return model


class RewardJudge:
    """A :class:`VLMJudge` as a reward component: its weight, mode and a deadline per batch.

    :meth:`submit` starts judging a batch of finished trajectories on a small
    thread pool and returns a future; :meth:`collect` returns its verdicts, or
    verdicts with ``error='timeout: ...'`` once ``timeout`` seconds have passed
    since the batch was submitted (the late answer is dropped).
    """

    def __init__(self, judge: VLMJudge, settings: JudgeSettings, *, owns_policy: bool = False) -> None:
        self.judge = judge
        self.owns_policy = owns_policy
        self.settings = settings
        self.weight = settings.effective_weight
        self.mode = settings.mode
        self.timeout = settings.timeout
        self._pool: cf.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.judge.config.name

    def submit(self, trajs: Sequence[Trajectory]) -> "cf.Future[list[Verdict]]":
        with self._lock:
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(max_workers=self.settings.workers,
                                                   thread_name_prefix="judge")
            return self._pool.submit(self.judge.judge_batch, list(trajs))

    def collect(self, future: "cf.Future[list[Verdict]]", n: int, wait_s: float) -> list[Verdict] | None:
        """The batch's verdicts if ready within ``wait_s`` seconds; ``None`` if still running."""
        try:
            verdicts = future.result(timeout=max(0.0, wait_s))
        except cf.TimeoutError:
            return None
        except Exception as exc:  # judge_batch does not raise on model trouble; a bug here is data too
            return [self.missing(f"judge crashed: {type(exc).__name__}: {exc}")] * n
        if len(verdicts) != n:
            return [self.missing(f"judge returned {len(verdicts)} verdicts for {n} episodes")] * n
        return verdicts

    def missing(self, error: str) -> Verdict:
        """A verdict that is missing for ``error`` (what a timeout or a crashed batch records)."""
        return Verdict(None, None, error=error, judge=self.name, model=self.judge.model_id)

    def close(self) -> None:
        """Stop the thread pool without waiting for a batch that overran its deadline."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
        self.judge.close()
        if self.owns_policy and hasattr(self.judge.policy, "close"):
            self.judge.policy.close()


def make_judge(settings: JudgeSettings, out_dir: str | os.PathLike[str] | None) -> RewardJudge | None:
    """The judge these settings describe, or ``None`` when no judge model is set.

    The policy is built with :func:`guiagent.policy.load_policy`: an http(s) URL
    is an OpenAI-compatible server (request timeout ``settings.timeout``, retries
    ``settings.retries``), anything else a local transformers model. Verdicts are
    cached in ``<out_dir>/judge_cache`` when ``settings.cache`` and ``out_dir`` are set.
    """
    if not settings.enabled:
        return None

    model = str(settings.model)
    if model.startswith(("http://", "https://")):
        policy = load_policy(model, model=settings.served_model, timeout=settings.timeout,
                             max_retries=settings.retries, api_key_env=settings.api_key_env)
        try:  # the name the server serves goes into verdicts and cache keys, not "auto"
            settings = replace(settings, served_model=policy.served_model())
        except BaseException:
            policy.close()
            raise
    else:
        policy = load_policy(model)
    cache_dir = str(Path(out_dir) / "judge_cache") if settings.cache and out_dir is not None else None
    return RewardJudge(VLMJudge(policy, judge_config(settings, cache_dir)), settings, owns_policy=True)

