"""Bench scripts run as ``python bench/NAME.py`` from a checkout: Python then puts ``bench/`` first
on the path, where ``bench/webui.py`` would shadow the project's ``webui`` package (guiagent refuses
to import beside a foreign ``webui``). Every script that imports the project puts the checkout first."""

from __future__ import annotations

import os
import re
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = re.compile(r"^\s*(from|import) (guiagent|rl|emulators|grounding|judge|webui|bench)\b", re.M)
TOP_LEVEL = re.compile(r"^(from|import) (guiagent|rl|emulators|grounding|judge|webui|bench)\b", re.M)
SCRIPTS = sorted(p for p in (ROOT / "bench").glob("*.py") if PROJECT.search(p.read_text()))


def test_bench_webui_would_shadow_the_package_from_bench_first_on_the_path():
    """The hazard the rule guards against is real: with bench/ first, importing guiagent fails."""
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import guiagent.policy"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the checkout on the path, behind bench/ (as on a GPU machine)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "bench", env=env)
    assert proc.returncode != 0 and "bench/webui.py" in proc.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_puts_the_checkout_first(script):
    text = script.read_text()
    insert = re.search(r"sys\.path\.insert\(0, ", text)
    assert insert, f"{script.name} imports the project but never puts the checkout first on sys.path"
    top = TOP_LEVEL.search(text)
    assert top is None or insert.start() < top.start(), \
        f"{script.name}: a project import at module level comes before the sys.path line"


def test_gpu_bench_profile_times_the_parts_of_an_update(tmp_path):
    """``bench/gpu.py --profile``'s profiler, on CPU with a model shaped as Qwen-VL's (a vision tower
    of checkpointed blocks and a language model under ``model``, behind a wrapper as peft's): both
    parts' forward passes are timed, the blocks' recomputation counted, and the tables written."""
    import importlib.util

    import torch
    from torch.utils.checkpoint import checkpoint

    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
    gpu = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(gpu)  # type: ignore[union-attr]

    class Inner(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.visual = Tower()
            self.language_model = torch.nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.language_model(self.visual(x))

    class Tower(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU())
                                              for _ in range(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:  # each block checkpointed, as transformers does it
                x = checkpoint(block, x, use_reentrant=False)
            return x

    class Outer(torch.nn.Module):  # as a ForConditionalGeneration holds its model
        def __init__(self) -> None:
            super().__init__()
            self.model = Inner()

    class Wrapper:  # as peft's PeftModel: base_model.model is the model
        def __init__(self, m: torch.nn.Module) -> None:
            self.base_model = type("Lora", (), {"model": m})()

    outer = Outer()
    opt = torch.optim.SGD(outer.parameters(), lr=0.01)

    def update() -> None:
        opt.zero_grad()
        outer.model(torch.randn(8, 32, requires_grad=True)).pow(2).mean().backward()
        opt.step()

    parts = gpu.profile_update(update, Wrapper(outer), str(tmp_path / "p"), cuda=False)
    assert set(parts) == {"vision tower", "vision tower blocks", "language model", "update"}
    assert parts["vision tower"]["calls"] == 1 and parts["language model"]["calls"] == 1
    assert parts["vision tower blocks"]["calls"] == 12, "3 blocks of 2 layers, each run again in the backward"
    assert 0 < parts["vision tower"]["cpu_ms"] <= parts["update"]["cpu_ms"]
    assert "Self CPU" in (tmp_path / "p" / "update_ops.txt").read_text()
    assert not (tmp_path / "p" / "update_trace.json").exists()
    mods = [outer.model.visual, *outer.model.visual.blocks, outer.model.language_model]
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in mods), "the hooks are gone after the profile"


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_gpu_bench_profile_reports_each_parts_memory_peak(tmp_path, monkeypatch):
    """With ``cuda``, each part's forward reports its peak above its start and the update its own
    peak, though the peak counter is reset as each part begins. The card's memory counters are the
    device's (no GPU here): a counter the model's forward passes move stands in for them."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
    gpu = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(gpu)  # type: ignore[union-attr]
    card = {"alloc": 1000, "peak": 1000}

    def use(n: int) -> None:  # n bytes held for a moment, then given back
        card["alloc"] += n
        card["peak"] = max(card["peak"], card["alloc"])
        card["alloc"] -= n

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: card["alloc"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: card["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: card.update(peak=card["alloc"]))

    class Part(torch.nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.n, self.lin = n, torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            use(self.n)
            return self.lin(x)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.visual, self.language_model = Part(2**30), Part(2**29)

    m = Model()

    def update() -> None:
        use(3 * 2**30)  # the backward's own peak, outside both parts
        m.language_model(m.visual(torch.randn(2, 4)))

    parts = gpu.profile_update(update, m, str(tmp_path / "p"), cuda=True)
    assert parts["vision tower"]["peak_gib"] == 1.0 and parts["language model"]["peak_gib"] == 0.5
    assert parts["update"]["peak_gib"] == round((1000 + 3 * 2**30) / 2**30, 3), "the peak before the first reset"


@pytest.mark.browser
def test_snapshot_bench_runs_the_loop_on_partial_batches_beside_the_raw_loops():
    """``bench/snapshot.py``'s loops at their smallest: a partial-batch loop and its tapping twin, each
    with both raw loops right after it, every request run to its end."""
    sys.path.insert(0, str(ROOT))
    from bench.snapshot import LOOP_MODES, loops

    assert LOOP_MODES["restore_lean_partial"]["_share"] == 0.5
    rows = loops(slots=2, rounds=1, episodes_per_slot=1, group_sizes=[2],
                 modes=("restore_lean_partial", "restore_lean_taps_partial"))
    runs = [r for r in rows if r["loop"] == "rollout"]
    assert [r["reset"] for r in runs] == ["restore_lean_partial", "restore_lean_taps_partial"]
    for r in runs:
        assert r["episodes"] == 2 and r["aborted"] == 0 and r["env_steps"] >= 2 and r["steps_per_s"] > 0
        assert set(r["ratio_vs_raw"]) == {"sequential_jpeg", "side_by_side_png", "sequential_jpeg_episodes"}
        assert r["trees_read"] == 0
        assert r["start_hits"] == 1  # the group's second episode restored the first's start
        # the pages the app server rendered for the run: at least the group's first start, visited
        assert r["page_requests_per_step"] >= 1 / r["env_steps"]
    raws = [r for r in rows if r["loop"] == "raw"]
    assert len(raws) == 6 and all(r["page_requests_per_step"] >= 0 for r in raws)
    # the raw loop with episodes loads each context's launcher before its first tap of every three
    # (and the others never do)
    for r in raws:
        taps_each = r["env_steps"] // 2
        expected = 2 * -(-taps_each // 3) if r["mode"] == "sequential_jpeg_episodes" else 0
        assert r["starts_loaded"] == expected, r


@pytest.mark.browser
def test_env_cpu_bench_runs_each_operation():
    """``bench/env_cpu.py``'s operations, one call each on one browser: none has rotted (the task
    checks' three ways give the same answer)."""
    sys.path.insert(0, str(ROOT))
    from bench.env_cpu import Rig
    from emulators.browser_support import find_chromium

    rig = Rig(find_chromium())
    try:
        ops = rig.operations()
        assert {"task checks, a copy each", "task checks, after a change", "task checks, no change",
                "settle script, CDP"} <= set(ops)
        for name, fn in ops.items():
            fn()
        task = rig.env.task
        assert task.evaluate(rig.device) == (1.0 if task.success(task.state(), None) else 0.0)
        assert task.milestones(rig.device) == [bool(x) for x in task.progress(task.state())]
    finally:
        rig.close()


def test_the_miniwob_table_counts_each_stage_per_task_beside_the_published_figures(tmp_path):
    """``bench/miniwob_table.py RUN``: per task, the run's held-out success of the warm start and after RL
    (success = raw reward > 0, counted from the stores), the published agents' figures from the CSV, and
    each column's mean over the set; a run without its evaluations is one line and exit 2."""
    from guiagent.store import Store
    from guiagent.types import Click, Step, TaskSpec
    from tests.webui.conftest import obs

    run = tmp_path / "run"
    for part, wins in (("eval-before", {"click-test": 1, "enter-text": 0}),
                       ("eval-after", {"click-test": 2, "enter-text": 1})):
        store = Store.open(run / part)
        rid = store.create_run(part)
        for task, won in wins.items():
            for k in range(2):
                w = store.begin_episode(rid, TaskSpec("miniwob", task, 1_000_000 + k, task, 3), "model")
                w.add_step(Step(0, obs(k), Click(0.5, 0.5), response="x", reward=0.0, terminated=True))
                w.complete(1.0 if k < won else -1.0)
        store.close()
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "miniwob_table.py"), str(run), "--agents", "human",
                          "cc_net"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()
    assert rows[0] == "| task | ours: warm start | ours: after RL | human | CC-Net (BC+RL) |"
    assert "| `click-test` | 50% (1/2) | 100% (2/2) | 100% | 100% |" in rows
    assert "| `enter-text` | 0% (0/2) | 50% (1/2) | 98% | 100% |" in rows
    assert rows[-1] == "| mean over the set | **25.0%** | **75.0%** | 99.0% (2 tasks) | 100.0% (2 tasks) |"
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "miniwob_table.py"), str(tmp_path / "none")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "holds no held-out evaluation" in bad.stderr


def _miniwob_evals(run, before: dict[str, int], after: dict[str, int], episodes: int = 4) -> None:
    """Held-out evaluations in ``run`` as a training run writes them: ``episodes`` a task, the first
    ``wins[task]`` of them with a positive raw reward."""
    from guiagent.store import Store
    from guiagent.types import Click, Step, TaskSpec
    from tests.webui.conftest import obs

    for part, wins in (("eval-before", before), ("eval-after", after)):
        store = Store.open(run / part)
        rid = store.create_run(part)
        for task, won in wins.items():
            for k in range(episodes):
                w = store.begin_episode(rid, TaskSpec("miniwob", task, 1_000_000 + k, task, 3), "model")
                w.add_step(Step(0, obs(k), Click(0.5, 0.5), response="x", reward=0.0, terminated=True))
                w.complete(1.0 if k < won else -1.0)
        store.close()


def test_the_miniwob_table_over_seeds_gives_each_seed_the_mean_and_the_worst(tmp_path):
    """``bench/miniwob_table.py RUN RUN``: one run a seed; a cell is the mean over the seeds with each
    seed's figure after it, the last row each seed's mean over the set and the worst of them; a missing
    evaluation in any of the runs is one line and exit 2, before anything is printed."""
    a, b = tmp_path / "s0", tmp_path / "s1"
    _miniwob_evals(a, {"click-test": 2, "enter-text": 0}, {"click-test": 4, "enter-text": 2})
    _miniwob_evals(b, {"click-test": 4, "enter-text": 1}, {"click-test": 4, "enter-text": 1})
    script = str(ROOT / "bench" / "miniwob_table.py")
    out = subprocess.run([sys.executable, script, str(a), str(b), "--agents", "human"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()
    assert rows[0] == "| task | ours: warm start (2 seeds) | ours: after RL (2 seeds) | human |"
    assert "| `click-test` | 75% (50/100) | 100% (100/100) | 100% |" in rows
    assert "| `enter-text` | 12% (0/25) | 38% (50/25) | 98% |" in rows
    assert rows[-1] == ("| mean over the set | **43.8%** (25.0 / 62.5; worst 25.0) "
                        "| **68.8%** (75.0 / 62.5; worst 62.5) | 99.0% (2 tasks) |")
    empty = tmp_path / "s2"   # its evaluations hold no episode of the set: "–", in no mean
    _miniwob_evals(empty, {}, {})
    out = subprocess.run([sys.executable, script, str(a), str(b), str(empty), "--agents", "human"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()
    assert "| `click-test` | 75% (50/100/–) | 100% (100/100/–) | 100% |" in rows
    assert rows[-1] == ("| mean over the set | **43.8%** (25.0 / 62.5 / –; worst 25.0) "
                        "| **68.8%** (75.0 / 62.5 / –; worst 62.5) | 99.0% (2 tasks) |")
    bad = subprocess.run([sys.executable, script, str(a), str(tmp_path / "none")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stdout == ""


def test_the_android_taps_bench_finds_the_covered_rows_and_prints_its_figures():
    """``bench/marks.py --android-taps``: the drawing-order rule timed on a real dump (nothing covered) and on a
    long list under a floating button (the two rows under it), the figures in its last line."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "marks.py"), "--android-taps", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    cases = result["cases"]
    assert cases["settings dump"]["covered"] == 0 and cases["200 rows, a floating button"]["covered"] == 2
    assert all(c["marks_and_taps_ms"] > 0 for c in cases.values()) and "load_1min" in result


def test_the_miniwob_table_of_a_warm_start_alone_reads_its_one_evaluation_for_both_columns(tmp_path):
    """A run of no iterations (``--iterations 0``) evaluates once, into ``eval-before``: the table shows it in both
    columns; without the summary saying so, the missing ``eval-after`` is still one line and exit 2."""
    import shutil

    run = tmp_path / "run"
    _miniwob_evals(run, {"click-test": 3}, {"click-test": 3})
    shutil.rmtree(run / "eval-after")
    script = str(ROOT / "bench" / "miniwob_table.py")
    bad = subprocess.run([sys.executable, script, str(run), "--agents", "human"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "eval-after holds no held-out evaluation" in bad.stderr
    (run / "summary.json").write_text(json.dumps({"iterations": 0}))
    out = subprocess.run([sys.executable, script, str(run), "--agents", "human"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "| `click-test` | 75% (3/4) | 75% (3/4) |" in out.stdout
