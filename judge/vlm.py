"""A VLM judge: does a trajectory accomplish its goal? Asked of any policy backend.

The judge shows a model the task goal, the action history as text and some
screenshots, and reads back a :class:`Verdict` (success, a score in [0, 1], a
reason, the steps it cites). Two ways to pick screenshots (``JudgeConfig.mode``):

``last_k``    the last ``k`` steps' screenshots and the final screen — one call;
``evidence``  first the text history alone, asking the judge which (at most ``k``)
              steps it needs to see; then those screenshots and the final screen —
              two calls (the idea of agent-chosen evidence: long episodes cost ``k``
              images, not all of them, and the images are the ones that matter);
``key_screens`` the last screens plus the steps where the screen changed most, within
              a visual-token budget (:mod:`judge.evidence`) — one call.

With ``votes = k > 1`` the verdict call is sampled k times and the votes are
aggregated (``majority`` or ``mean``), as ZeroGUI does for its reward judge.

Verdicts are cached by content (the config that shapes the output, the model,
the goal, the action texts, the screenshot hashes), judge calls are budgeted and
rate-limited, and malformed judge output becomes a verdict with ``error`` set —
nothing here raises on model text, a spent budget or a failing backend.

Example (``policy`` is any :class:`~guiagent.policy.base.Policy`)::

    judge = VLMJudge(policy, JudgeConfig(mode="last_k", k=3, cache_dir="runs/x/judge"))
    verdict = judge.judge(trajectory)
    if verdict.error is None:
        print(verdict.success, verdict.score, verdict.reason)
    store_verdict(store, trajectory.episode_id, verdict)

See docs/judge.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

from guiagent.policy.base import Chat, Policy, SamplingParams
from guiagent.store import EpisodeFilter, EpisodeSummary, Store, StoreReader
from guiagent.types import Trajectory
from judge.evidence import image_tokens, screen_change, select_evidence
from judge.vlm_cache import CallBudget, RateLimiter, VerdictCache, cache_key
from judge.vlm_parse import SUCCESS_THRESHOLD, ParsedVerdict, parse_step_selection, parse_verdict
from judge.vlm_prompt import (
    PROMPT_VERSION, history_lines, last_k_steps, screen_steps, screenshot_digest, selection_chat,
    verdict_chat,
)

__all__ = ["JudgeConfig", "Verdict", "VLMJudge", "store_verdict", "Disagreement", "judge_disagreement",
           "disagreeing_episodes", "BUDGET_EXHAUSTED", "aggregate_votes", "missing_kind"]

BUDGET_EXHAUSTED = "judge budget exhausted"
#: the longest judge text kept in the store's verdict record (the UI shows it; the cache keeps all)
_STORED_RAW_CHARS = 8_000


@dataclass(frozen=True)
class JudgeConfig:
    """How the VLM judge looks at trajectories, and what it may spend."""

    name: str = "vlm"
    """the judge's name in verdicts and in the store's judgements (the UI's judge filter)"""
    mode: Literal["last_k", "evidence", "key_screens"] = "last_k"
    """``last_k``: the last k screenshots (one call); ``evidence``: the judge picks up to k steps from the
    text history, then sees those screenshots (two calls); ``key_screens``: the last screens and the steps
    where the screen changed most, up to k screens within ``token_budget`` (one call)"""
    k: int = 3
    """how many step screenshots the judge sees, besides the final screen"""
    final_k: int = 1
    """``key_screens``: how many of the last step screens are always among the k"""
    token_budget: int = 6000
    """``key_screens``: most visual tokens of the screenshots of one verdict call, the final screen's
    included (Qwen-VL: one token per 28x28 pixels after downscaling to max_image_pixels)"""
    votes: int = 1
    """verdict samples per trajectory, aggregated by ``aggregation`` (k > 1 needs temperature > 0)"""
    aggregation: Literal["majority", "mean"] = "majority"
    """``majority``: success when more than half the usable votes say so (score 1 or 0);
    ``mean``: the mean of the votes' scores (success when >= 0.5)"""
    max_image_pixels: int = 1280 * 720
    """screenshots larger than this many pixels are downscaled (aspect kept) before they are sent"""
    thought_chars: int = 200
    """the agent's thought of each step is cut to this many characters in the history (0 leaves it out)"""
    temperature: float = 0.0
    """sampling temperature of the judge (0 = greedy, which makes cached verdicts reproducible)"""
    max_new_tokens: int = 256
    """the longest judge answer, in tokens"""
    budget: int | None = None
    """the most judge calls (policy generations) this judge makes; later trajectories get a verdict with
    error 'judge budget exhausted'. None = unlimited. Cache hits cost nothing"""
    rate_limit: float | None = None
    """the most judge calls per second (token bucket shared by all threads); None = no limit"""
    burst: int = 1
    """how many calls the rate limiter lets through at once before spacing them"""
    batch_size: int = 8
    """the most chats sent to the policy in one ``generate`` call"""
    cache_dir: str | None = None
    """folder of the verdict cache (``judge_cache.sqlite``); None turns caching off"""
    model_id: str = ""
    """the judge model's id and version as recorded in verdicts and cache keys; empty: the policy's
    ``name`` attribute, or its class name. Set it to the served model and revision for HTTP backends"""

    def __post_init__(self) -> None:
        if self.mode not in ("last_k", "evidence", "key_screens"):
            raise ValueError(f"mode must be 'last_k', 'evidence' or 'key_screens', got {self.mode!r}")
        if self.votes < 1:
            raise ValueError(f"votes must be >= 1, got {self.votes}")
        if self.votes > 1 and self.temperature == 0:
            raise ValueError(f"votes={self.votes} at temperature 0 asks for {self.votes} identical answers; "
                             "set a temperature > 0 (e.g. 0.7) or votes=1")
        if self.aggregation not in ("majority", "mean"):
            raise ValueError(f"aggregation must be 'majority' or 'mean', got {self.aggregation!r}")
        if self.final_k < 0 or self.token_budget < 0:
            raise ValueError("final_k and token_budget must be >= 0")
        if self.k < 1:
            raise ValueError(f"k must be >= 1 (the number of step screenshots shown), got {self.k}")
        if self.max_image_pixels < 28 * 28:
            raise ValueError(f"max_image_pixels must be at least 784 (28x28), got {self.max_image_pixels}")
        if self.thought_chars < 0:
            raise ValueError(f"thought_chars must be >= 0, got {self.thought_chars}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.budget is not None and self.budget < 0:
            raise ValueError(f"budget must be >= 0 or None (unlimited), got {self.budget}")
        if self.rate_limit is not None and not self.rate_limit > 0:
            raise ValueError(f"rate_limit must be > 0 calls/s or None (no limit), got {self.rate_limit}")
        if self.burst < 1 or self.batch_size < 1:
            raise ValueError("burst and batch_size must be >= 1")
        if not self.name:
            raise ValueError("name must not be empty (it names the judge in the store)")

    @property
    def calls_per_trajectory(self) -> int:
        return self.votes + (1 if self.mode == "evidence" else 0)

    def output_fields(self) -> dict[str, Any]:
        """The fields that change what the judge answers (part of the cache key)."""
        out = {"mode": self.mode, "k": self.k, "max_image_pixels": self.max_image_pixels,
               "thought_chars": self.thought_chars, "temperature": self.temperature,
               "max_new_tokens": self.max_new_tokens, "prompt_version": PROMPT_VERSION}
        if self.mode == "key_screens":
            out.update(final_k=self.final_k, token_budget=self.token_budget)
        if self.votes > 1:
            out.update(votes=self.votes, aggregation=self.aggregation)
        return out


@dataclass(frozen=True)
class Verdict:
    """A judge's decision on one trajectory.

    ``error`` set means there is no usable decision (``success is None``): the
    output was malformed or contradictory, the budget was spent, or the backend
    failed. ``score`` is the judge's confidence in success, in [0, 1], and agrees
    with ``success`` (``score >= 0.5`` exactly when ``success``).
    """

    success: bool | None
    score: float | None
    reason: str = ""
    cited_steps: tuple[int, ...] = ()
    """steps the judge named as evidence (those the trajectory does not have are dropped)"""
    raw: str = ""
    """the judge's text, unchanged"""
    error: str | None = None
    cached: bool = False
    """True when this verdict came from the cache (no call was made)"""
    judge: str = ""
    model: str = ""
    shown_steps: tuple[int, ...] = ()
    """the steps whose screenshots the judge saw"""
    selection_raw: str = ""
    """evidence mode: the judge's text of the first call (its step choice)"""
    calls: int = 0
    """policy calls made for this verdict (0 when cached or refused)"""
    cache_key: str = ""
    votes: tuple[float, ...] = ()
    """with ``votes > 1``: each usable vote's score, in order (the aggregate is ``score``)"""

    @property
    def reward(self) -> float | None:
        """The ``judge`` reward component's value (:mod:`judge.compose`): the score, None on error."""
        return None if self.error is not None else self.score

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["cited_steps"] = list(self.cited_steps)
        d["shown_steps"] = list(self.shown_steps)
        d["votes"] = list(self.votes)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Verdict":
        names = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in data.items() if k in names}
        d["cited_steps"] = tuple(d.get("cited_steps", ()))
        d["shown_steps"] = tuple(d.get("shown_steps", ()))
        d["votes"] = tuple(d.get("votes", ()))
        return cls(**d)


@dataclass
class _Job:
    """One trajectory being judged (mutable scratch state of :meth:`VLMJudge.judge_batch`)."""

    slots: list[int]
    traj: Trajectory
    key: str
    reserved: int
    shown: tuple[int, ...] = ()
    selection_raw: str = ""
    calls: int = 0
    error: str | None = None


class VLMJudge:
    """Judges trajectories with a policy backend. Thread-safe; see the module docstring."""

    def __init__(self, policy: Policy, config: JudgeConfig = JudgeConfig()) -> None:
        if not hasattr(policy, "generate"):
            raise TypeError(f"policy must implement generate(chats, sampling), got {type(policy).__name__}")
        self.policy = policy
        self.config = config
        self.model_id = config.model_id or str(getattr(policy, "name", "") or type(policy).__name__)
        self.budget = CallBudget(config.budget)
        self.limiter = RateLimiter(config.rate_limit, config.burst)
        self.cache = VerdictCache(config.cache_dir) if config.cache_dir else None
        self.sampling = SamplingParams(max_new_tokens=config.max_new_tokens, temperature=config.temperature)
        # An in-process model is not safe to run from two threads at once (the rollout judges batches on a
        # small thread pool); an HTTP backend (it has a base_url) queues its own requests.
        self._generate_lock = None if hasattr(policy, "base_url") else threading.Lock()

    # -- keys -------------------------------------------------------------------------------

    def key(self, traj: Trajectory) -> str:
        """The cache key of ``traj``: what the judge would be shown, and by whom it would be judged."""
        cfg = self.config
        return cache_key({
            "config": cfg.output_fields(),
            "model": self.model_id,
            "model_version": int(getattr(self.policy, "version", 0) or 0),
            "goal": traj.task.goal,
            "status": traj.status,
            "actions": history_lines(traj, cfg.thought_chars),
            "screens": [screenshot_digest(s) for s in traj.steps],
            "final": screenshot_digest(traj.final_observation),
        })

    # -- judging ----------------------------------------------------------------------------

    def judge(self, traj: Trajectory) -> Verdict:
        """The verdict on one trajectory (never raises on model output, budget or backend trouble)."""
        return self.judge_batch([traj])[0]

    def judge_batch(self, trajs: Sequence[Trajectory]) -> list[Verdict]:
        """Verdicts for many trajectories, in order; the policy is called in batches of ``batch_size``.

        Cache hits are answered first; identical trajectories in one batch are judged once.
        """
        out: list[Verdict | None] = [None] * len(trajs)
        jobs: dict[str, _Job] = {}
        for i, traj in enumerate(trajs):
            try:
                key = self.key(traj)
            except Exception as exc:  # not a Trajectory, or one with broken fields
                out[i] = self._refused(f"cannot judge this input: {type(exc).__name__}: {exc}", "")
                continue
            if key in jobs:
                jobs[key].slots.append(i)
                continue
            hit = self._cached(key)
            if hit is not None:
                out[i] = hit
            elif not self.budget.try_reserve(self.config.calls_per_trajectory):
                out[i] = self._refused(BUDGET_EXHAUSTED, key)
            else:
                jobs[key] = _Job([i], traj, key, self.config.calls_per_trajectory)
        todo = list(jobs.values())
        if self.config.mode == "evidence":
            self._select_evidence(todo)
        else:
            for job in todo:
                job.shown = (self.key_screens(job.traj) if self.config.mode == "key_screens"
                             else last_k_steps(job.traj, self.config.k))
        for job, verdict in zip(todo, self._verdicts(todo)):
            for i in job.slots:
                out[i] = verdict
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:  # every slot is filled above; a gap would be a bug here, never the caller's fault
            raise AssertionError(f"no verdict for trajectories {missing}")
        return out  # type: ignore[return-value]

    def key_screens(self, traj: Trajectory) -> tuple[int, ...]:
        """``key_screens`` mode: the step indices shown (:func:`judge.evidence.select_evidence`)."""
        cfg = self.config
        steps = traj.steps
        shots = [s.observation.screenshot for s in steps]
        change = [0.0] + [screen_change(shots[i - 1], shots[i]) if shots[i] is not None else 0.0
                          for i in range(1, len(steps))]
        cost = [image_tokens(s.observation.width, s.observation.height, cfg.max_image_pixels)
                if s.observation.screenshot is not None else -1 for s in steps]
        final = traj.final_observation
        final_cost = (image_tokens(final.width, final.height, cfg.max_image_pixels)
                      if final is not None and final.screenshot is not None else 0)
        picked = select_evidence(change, cost, final_k=cfg.final_k, max_screens=cfg.k,
                                 token_budget=cfg.token_budget, final_cost=final_cost)
        return tuple(steps[i].index for i in picked)

    def _cached(self, key: str) -> Verdict | None:
        if self.cache is None:
            return None
        try:
            stored = self.cache.get(key)
            hit = Verdict.from_dict(stored) if stored is not None else None
        except Exception:  # an unreadable entry is a miss
            return None
        if hit is None:
            return None
        return dataclasses.replace(hit, cached=True, calls=0, judge=self.config.name, cache_key=key)

    def _refused(self, error: str, key: str) -> Verdict:
        return Verdict(success=None, score=None, error=error, judge=self.config.name, model=self.model_id,
                       cache_key=key)

    def _generate(self, chats: list[Chat]) -> list[str | Exception]:
        """Texts (or the backend's exception) for each chat, rate-limited, in batches."""
        results: list[str | Exception] = []
        for start in range(0, len(chats), self.config.batch_size):
            chunk = chats[start:start + self.config.batch_size]
            for _ in chunk:
                self.limiter.acquire()
            try:
                with self._generate_lock or contextlib.nullcontext():
                    gens = self.policy.generate(chunk, self.sampling)
                if len(gens) != len(chunk):
                    raise RuntimeError(f"the policy returned {len(gens)} generations for {len(chunk)} chats")
                results += [str(g.text) for g in gens]
            except Exception as exc:  # any backend failure becomes a verdict error, never a crash
                results += [exc] * len(chunk)
        return results

    def _select_evidence(self, jobs: list[_Job]) -> None:
        """Evidence mode, first call: the judge picks steps from the text history."""
        asking = []
        for job in jobs:
            if screen_steps(job.traj):
                asking.append(job)
            else:  # nothing to choose from: skip the first call and give it back
                self.budget.refund(1)
                job.reserved -= 1
        texts = self._generate([selection_chat(j.traj, self.config.k, thought_chars=self.config.thought_chars)
                                for j in asking])
        for job, text in zip(asking, texts):
            job.calls += 1
            if isinstance(text, Exception):
                job.error = f"backend error: {type(text).__name__}: {text}"
                self.budget.refund(job.reserved - job.calls)  # the verdict call will not be made
                continue
            job.selection_raw = text
            picked = parse_step_selection(text, set(screen_steps(job.traj)), self.config.k)
            # an unusable choice falls back to the last k screens rather than judging blind
            job.shown = tuple(sorted(picked)) or last_k_steps(job.traj, self.config.k)

    def _verdicts(self, jobs: list[_Job]) -> list[Verdict]:
        cfg = self.config
        chats: list[Chat] = []
        asking: list[_Job] = []
        for job in jobs:
            if job.error is not None:
                continue
            try:
                chat = verdict_chat(job.traj, job.shown, max_pixels=cfg.max_image_pixels,
                                    thought_chars=cfg.thought_chars)
            except Exception as exc:  # e.g. a screenshot that is not an image
                job.error = f"cannot build the judge prompt: {type(exc).__name__}: {exc}"
                self.budget.refund(job.reserved - job.calls)
                continue
            chats += [chat] * cfg.votes  # k samples of one chat; the backends vary the seed per request
            asking.append(job)
        texts = self._generate(chats)
        answers = {id(job): texts[n * cfg.votes:(n + 1) * cfg.votes] for n, job in enumerate(asking)}
        verdicts = []
        for job in jobs:
            got = answers.get(id(job))
            if got is None or all(isinstance(t, Exception) for t in got):
                if got is not None:
                    job.calls += len(got)
                    job.error = f"backend error: {type(got[0]).__name__}: {got[0]}"
                verdicts.append(Verdict(None, None, error=job.error, judge=cfg.name, model=self.model_id,
                                        shown_steps=job.shown, selection_raw=job.selection_raw,
                                        calls=job.calls, cache_key=job.key))
                continue
            job.calls += len(got)
            valid = {s.index for s in job.traj.steps}
            parsed = [parse_verdict(t, valid) if isinstance(t, str) else
                      ParsedVerdict(None, None, "", (), f"backend error: {type(t).__name__}: {t}")
                      for t in got]
            agg = aggregate_votes(parsed, cfg.aggregation) if cfg.votes > 1 else parsed[0]
            raw = got[0] if cfg.votes == 1 else "\n--- vote ---\n".join(
                t if isinstance(t, str) else f"(backend error: {t})" for t in got)
            verdict = Verdict(agg.success, agg.score, agg.reason, agg.cited_steps, raw=str(raw),
                              error=agg.error, judge=cfg.name, model=self.model_id, shown_steps=job.shown,
                              selection_raw=job.selection_raw, calls=job.calls, cache_key=job.key,
                              votes=tuple(p.score for p in parsed if p.error is None and p.score is not None)
                              if cfg.votes > 1 else ())
            # model-made verdicts only: a spent budget or a dead server is no answer worth keeping
            if self.cache is not None and not any(isinstance(t, Exception) for t in got):
                self.cache.put(job.key, verdict.to_dict())
            verdicts.append(verdict)
        return verdicts

    @property
    def calls_made(self) -> int:
        """Judge calls spent so far (the budget's count)."""
        return self.budget.used

    def close(self) -> None:
        """Close the cache (the policy belongs to the caller)."""
        if self.cache is not None:
            self.cache.close()


def aggregate_votes(votes: Sequence[ParsedVerdict], aggregation: str = "majority") -> ParsedVerdict:
    """One verdict from k sampled ones (ZeroGUI-style voting); votes with an error are left out.

    ``majority``: success when strictly more than half the usable votes say success
    (a tie is failure: without a majority there is no evidence of success); the
    score is 1.0 or 0.0. ``mean``: the score is the mean of the usable votes'
    scores, success when it is >= 0.5. The reason and cited steps come from the
    first usable vote that agrees with the outcome. No usable vote: an error
    carrying the first vote's error.

    >>> v = lambda s, p: ParsedVerdict(s, p, "r", ())
    >>> aggregate_votes([v(True, .9), v(False, .4), v(True, .6)]).score
    1.0
    >>> round(aggregate_votes([v(True, .9), v(False, .4), v(True, .6)], "mean").score, 4)
    0.6333
    """
    usable = [v for v in votes if v.error is None and v.success is not None and v.score is not None]
    if not usable:
        first = next((v.error for v in votes if v.error), "no votes")
        return ParsedVerdict(None, None, "", (), f"no usable vote of {len(votes)}: {first}")
    if aggregation == "mean":
        score = sum(v.score for v in usable) / len(usable)  # type: ignore[misc]
        success = score >= SUCCESS_THRESHOLD
    elif aggregation == "majority":
        success = 2 * sum(bool(v.success) for v in usable) > len(usable)
        score = 1.0 if success else 0.0
    else:
        raise ValueError(f"aggregation must be 'majority' or 'mean', got {aggregation!r}")
    lead = next((v for v in usable if v.success == success), usable[0])
    return ParsedVerdict(success, score, lead.reason, lead.cited_steps, None,
                         f"{aggregation} of {len(usable)}")


def missing_kind(error: str | None) -> str:
    """Why a verdict is missing, as one word for counts and the UI: ``budget``, ``rate_limit``,
    ``timeout``, ``garbage`` (model text without a readable verdict), ``backend``, ``input`` or ``""``."""
    if not error:
        return ""
    e = error.lower()
    if e.startswith(BUDGET_EXHAUSTED):
        return "budget"
    if "timeout" in e or "timed out" in e:
        return "timeout"
    if "429" in e or "rate limit" in e:
        return "rate_limit"
    if e.startswith(("backend error", "no usable vote")) and "backend error" in e:
        return "backend"
    if e.startswith(("cannot build", "cannot judge")):
        return "input"
    return "garbage"


# -- the store --------------------------------------------------------------------------------


def store_verdict(store: "Store", episode_id: str, verdict: Verdict, judge_name: str | None = None, *,
                  step: int | None = None, rule_success: float | None = None,
                  extra: Mapping[str, Any] | None = None) -> int:
    """Record ``verdict`` as a judgement of ``episode_id`` (the web UI shows it); return its id.

    The stored score is the verdict's score (None when the verdict is missing), so
    the store's disagreement filter (score >= 0.5 vs the task's success >= 0.5)
    agrees with ``verdict.success``; the reason is the judge's, or
    ``judge missing (<kind>): <error>``. The verdict's fields go into the
    judgement's ``verdict`` record (the judge's text cut to a few thousand
    characters) with ``missing`` (the reason's kind, "" when present),
    ``rule_success`` (the task's own outcome beside the judge's; None: no rule
    check) and ``extra`` (e.g. the weight and mode it was used with).
    """
    record = verdict.to_dict()
    record["raw"] = verdict.raw[:_STORED_RAW_CHARS]
    ok = verdict.error is None
    record["missing"] = "" if ok else (missing_kind(verdict.error) or "garbage")
    record["rule_success"] = None if rule_success is None else float(rule_success)
    record.update(dict(extra or {}))
    return store.add_judgement(episode_id, judge_name or verdict.judge or "vlm",
                               verdict.score if ok else None, step=step, verdict=record,
                               reason=verdict.reason if ok else f"judge missing ({record['missing']}): "
                                                                f"{verdict.error}")


@dataclass(frozen=True)
class Disagreement:
    """Where a judge and the task's own rule disagree, over one run's judged episodes."""

    run_id: str | None
    judge: str | None
    judged: int
    """episodes with an episode-level judgement (of ``judge``, if named)"""
    episodes: tuple["EpisodeSummary", ...] = ()
    """the episodes where they disagree"""
    false_positives: tuple[str, ...] = field(default=())
    """episode ids the judge called a success and the task a failure"""
    false_negatives: tuple[str, ...] = field(default=())
    """episode ids the judge called a failure and the task a success"""

    @property
    def rate(self) -> float | None:
        """Disagreements per judged episode (None when nothing was judged)."""
        return len(self.episodes) / self.judged if self.judged else None


def judge_disagreement(reader: "StoreReader", run_id: str | None = None, judge: str | None = None
                       ) -> Disagreement:
    """Judge-vs-rule disagreement of a run, through the store's own disagreement filter."""
    judged = reader.count_episodes(EpisodeFilter(run_id=run_id, judge=judge, judged=True))
    episodes = tuple(reader.iter_episodes(EpisodeFilter(run_id=run_id, judge=judge, disagreement=True)))
    return Disagreement(run_id=run_id, judge=judge, judged=judged, episodes=episodes,
                        false_positives=tuple(e.episode_id for e in episodes if not e.succeeded),
                        false_negatives=tuple(e.episode_id for e in episodes if e.succeeded))


def disagreeing_episodes(trajs: Sequence[Trajectory], verdicts: Sequence[Verdict]) -> tuple[str, ...]:
    """Episode ids whose usable verdict differs from the task's success (>= 0.5), without a store."""
    if len(trajs) != len(verdicts):
        raise ValueError(f"got {len(trajs)} trajectories but {len(verdicts)} verdicts")
    return tuple(t.episode_id for t, v in zip(trajs, verdicts) if v.error is None and v.success is not None
                 and v.success != (t.success >= SUCCESS_THRESHOLD))
