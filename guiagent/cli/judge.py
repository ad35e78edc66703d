"""``guiagent judge eval``: score a VLM judge on stored episodes against their rule outcomes.

Examples::

    guiagent judge eval --runs runs/grpo --judge-model http://127.0.0.1:8000/v1 --served-model qwen2.5-vl-7b
    guiagent judge eval --runs runs --judge-model runs/tiny --votes 3 --temperature 0.7 --out runs/judge.json

Every completed episode of the run directories under ``--runs`` is shown to the
judge; its verdict is compared with the task's own rule outcome (success >= 0.5).
The JSON report holds agreement, precision, recall and Cohen's κ
(:mod:`judge.calibration`), the missing verdicts with their reasons, and every
disagreement with both sides (the judge's reason, the rule outcome, the episode).
The web UI lists reports found under its runs folder (``/judge``). Nothing is
written to the stores.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from guiagent.cli._common import emit_json, fail, log
from guiagent.config import parse_config
from guiagent.store import EpisodeFilter, StoreReader
from judge.calibration import SUCCESS_THRESHOLD, calibration
from judge.settings import JudgeSettings, make_judge
from judge.vlm import missing_kind

#: the report's file name when --out is not given (the web UI looks for judge_eval*.json)
REPORT_NAME = "judge_eval.json"
REPORT_VERSION = 1


@dataclass
class JudgeEvalConfig:
    """Score a VLM judge on stored episodes against their rule outcomes; write a JSON report."""

    runs: str = "runs"
    """a run directory (holding store.sqlite) or a folder of run directories (one or two levels deep)"""
    judge_model: str = ""
    """the judge: a local model folder, a hub id, or an http(s):// OpenAI-compatible server URL"""
    served_model: str = "auto"
    """the model name sent to an OpenAI-compatible server (its --served-model-name); auto: the one model
    the server lists at /v1/models"""
    api_key_env: str = "OPENAI_API_KEY"
    """environment variable holding the server's API key"""
    votes: int = 1
    """verdict samples per episode (k > 1 needs --temperature > 0)"""
    aggregation: Literal["majority", "mean"] = "majority"
    """how votes are combined"""
    temperature: float = 0.0
    """judge sampling temperature"""
    evidence: Literal["key_screens", "last_k", "judge_picks"] = "key_screens"
    """which screenshots the judge sees (see docs/judge.md)"""
    screens: int = 3
    """most step screenshots shown, besides the final screen"""
    token_budget: int = 6000
    """key_screens: most visual tokens of one verdict call's screenshots"""
    max_new_tokens: int = 256
    """longest judge answer, in tokens"""
    budget: int | None = None
    """most judge calls (None: unlimited); later episodes are reported missing"""
    rate_limit: float | None = None
    """most judge calls per second"""
    timeout: float = 120.0
    """seconds per HTTP request"""
    run_id: str | None = None
    """only this run id (default: every run found)"""
    limit: int | None = None
    """judge at most this many episodes (the most recent first)"""
    batch: int = 8
    """episodes per judge batch"""
    out: str | None = None
    """report path (default: <runs>/judge_eval.json)"""
    json: bool = False
    """print the report's summary as one JSON object on the last stdout line"""

    def __post_init__(self) -> None:
        if not self.judge_model:
            raise ValueError("--judge-model is required: a model folder, hub id or http(s):// server URL")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {self.limit}")
        if self.batch < 1:
            raise ValueError(f"--batch must be >= 1, got {self.batch}")
        self.settings()  # the judge's own checks, with their messages

    def settings(self):
        return JudgeSettings(model=self.judge_model, served_model=self.served_model,
                             api_key_env=self.api_key_env, mode="log", votes=self.votes,
                             aggregation=self.aggregation,
                             temperature=self.temperature, evidence=self.evidence, screens=self.screens,
                             token_budget=self.token_budget, max_new_tokens=self.max_new_tokens,
                             budget=self.budget, rate_limit=self.rate_limit, timeout=self.timeout,
                             cache=False, name="judge-eval")


def _run_dirs(root: Path) -> tuple[Path, ...]:
    from webui.registry import discover_run_dirs  # lazy: webui loads Flask (0.2 s); only the run scan needs it

    return discover_run_dirs(root)


def evaluate(cfg: JudgeEvalConfig, judge: Any = None) -> dict[str, Any]:
    """Judge the stored episodes and build the report (``judge``: a ready :class:`~judge.vlm.VLMJudge`)."""
    root = Path(cfg.runs)
    dirs = _run_dirs(root)
    if not dirs:
        raise FileNotFoundError(f"no run directory (holding store.sqlite) at or under {root}")
    owned = None
    if judge is None:
        owned = make_judge(cfg.settings(), None)
        judge = owned.judge
    t0 = time.perf_counter()
    pairs: list[tuple[bool, bool]] = []
    disagreements: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    reasons: dict[str, int] = {}
    episodes = 0
    try:
        for run_dir in dirs:
            with StoreReader(run_dir) as reader:
                summaries = list(reader.iter_episodes(EpisodeFilter(run_id=cfg.run_id, status="completed"),
                                                      sort="started", descending=True))
                if cfg.limit is not None:
                    summaries = summaries[:max(0, cfg.limit - episodes)]
                for start in range(0, len(summaries), cfg.batch):
                    chunk = summaries[start:start + cfg.batch]
                    trajs = [reader.load_trajectory(e.episode_id, pixels=True) for e in chunk]
                    for e, v in zip(chunk, judge.judge_batch(trajs)):
                        episodes += 1
                        rule = e.success >= SUCCESS_THRESHOLD
                        where = {"run_dir": str(run_dir), "run_id": e.run_id, "episode_id": e.episode_id,
                                 "task_id": e.task_id, "seed": e.seed, "goal": e.goal}
                        if v.error is not None or v.success is None:
                            kind = missing_kind(v.error) or "garbage"
                            reasons[kind] = reasons.get(kind, 0) + 1
                            missing.append({**where, "missing": kind, "error": v.error})
                            continue
                        pairs.append((bool(v.success), rule))
                        if bool(v.success) != rule:
                            disagreements.append({**where, "rule_success": e.success,
                                                  "judge_success": v.success, "judge_score": v.score,
                                                  "judge_reason": v.reason,
                                                  "shown_steps": list(v.shown_steps),
                                                  "cited_steps": list(v.cited_steps)})
                if cfg.limit is not None and episodes >= cfg.limit:
                    break
    finally:
        if owned is not None:
            owned.close()
    cal = calibration(pairs)
    settings = asdict(cfg.settings())
    return {"version": REPORT_VERSION, "created_at": time.time(), "runs": [str(d) for d in dirs],
            "judge": {k: settings[k] for k in ("model", "served_model", "votes", "aggregation", "temperature",
                                               "evidence", "screens", "token_budget", "max_new_tokens")},
            "episodes": episodes, "judged": cal.n, "missing": len(missing), "missing_reasons": reasons,
            "calls": judge.calls_made, "seconds": round(time.perf_counter() - t0, 3),
            "calibration": cal.to_dict(), "disagreements": disagreements, "missing_episodes": missing}


def _fmt(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.3f}"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: guiagent judge eval --runs DIR --judge-model M [--votes K] [--out REPORT.json]\n\n"
              "commands:\n  eval  score a VLM judge on stored episodes against their rule outcomes")
        return 0 if argv else 2
    if argv[0] != "eval":
        print(f"guiagent judge: unknown command {argv[0]!r} (try: guiagent judge eval --help)",
              file=sys.stderr)
        return 2
    cfg = parse_config(JudgeEvalConfig, argv[1:], prog="guiagent judge eval")
    root = Path(cfg.runs)
    if not root.exists():
        return fail("judge eval", f"--runs {root} does not exist")
    out = Path(cfg.out) if cfg.out else (root if root.is_dir() else root.parent) / REPORT_NAME
    if out.exists() and out.is_dir():
        return fail("judge eval", f"--out {out} is a folder; give a file path such as {out / REPORT_NAME}")
    try:
        report = evaluate(cfg)
    except OSError as e:  # no run directory under --runs, an unreadable store, a judge server not answering
        return fail("judge eval", e)
    except ImportError as e:  # a backend package that is not installed
        return fail("judge eval", e, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str))
    tmp.replace(out)
    reasons = report["missing_reasons"]
    if report["episodes"] and not report["judged"] and set(reasons) <= {"backend", "timeout"}:
        # the judge never answered (a server down, a wrong URL): a failure of the run, not figures
        counts = ", ".join(f"{n} {k}" for k, n in sorted(reasons.items()))
        return fail("judge eval", f"no verdict on any of the {report['episodes']} episodes: the judge failed on "
                    f"each ({counts}; the first: {report['missing_episodes'][0]['error']}); report: {out}", 1)
    c = report["calibration"]
    log(f"judged {report['judged']} of {report['episodes']} episodes ({report['missing']} missing, "
        f"{report['calls']} calls, {report['seconds']:.1f} s)")
    print(f"judge vs rule: agreement {_fmt(c['agreement'])}, precision {_fmt(c['precision'])}, "
          f"recall {_fmt(c['recall'])}, kappa {_fmt(c['kappa'])}; "
          f"{len(report['disagreements'])} disagreements -> {out}")
    if cfg.json:
        emit_json({k: v for k, v in report.items() if k not in ("disagreements", "missing_episodes")}
                  | {"report": str(out), "disagreements": len(report["disagreements"])})
    return 0
