"""`guiagent model init` smoke test: builds offline, reloads through the loader, generates."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from guiagent.cli import model as model_cli
from guiagent.config import ConfigError
from guiagent.policy import SamplingParams, load_policy, message
from guiagent.policy.tiny import TinyModelSpec


def test_model_init_builds_reloads_and_generates(tmp_path):
    out = tmp_path / "tiny"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "guiagent", "model", "init", "--size", "tiny", "--out", str(out),
                        "--seed", "3", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["out"] == str(out) and info["family"] == "qwen2_5_vl" and info["size"] == "tiny"
    assert 1_500_000 < info["params"] < 3_500_000
    assert info["check"]["generated_tokens"] == 4
    for f in ("config.json", "model.safetensors", "tokenizer.json", "preprocessor_config.json",
              "chat_template.jinja"):
        assert (out / f).is_file(), f
    policy = load_policy(str(out), device="cpu")
    assert type(policy.model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert sum(p.numel() for p in policy.parameters()) == info["params"]
    # digits are single tokens (coordinates learn faster that way)
    assert policy.tokenizer.tokenize("1234") == ["1", "2", "3", "4"]
    for t in ("<|im_start|>", "<|image_pad|>", "<tool_call>", "<|box_start|>"):
        assert len(policy.tokenizer.tokenize(t)) == 1
    png = (out / "x.png")
    from PIL import Image

    Image.new("RGB", (112, 112), "gray").save(png)
    [g] = policy.generate([[message("user", png.read_bytes(), "hello")]], SamplingParams(max_new_tokens=5, seed=1))
    assert len(g.token_ids) >= 1


def test_same_seed_builds_the_same_weights(tmp_path):
    import torch
    from safetensors.torch import load_file

    for name in ("a", "b"):
        model_cli.init(model_cli.ModelInitConfig(out=str(tmp_path / name), spec=TinyModelSpec(seed=5), check=False))
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (tmp_path / "b" / "tokenizer.json").read_text()


def test_bad_flags_are_rejected_with_a_reason(tmp_path, capsys):
    with pytest.raises((SystemExit, ConfigError)) as e:
        model_cli.main(["init", "--size", "tiny"])
    assert "--out" in str(e.value) + capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"--size 'huge': choose one of tiny, small"):  # one line, exit 2 in main
        model_cli.main(["init", "--size", "huge", "--out", str(tmp_path)])
    assert model_cli.main(["frobnicate"]) == 2
    from guiagent.config import from_mapping

    with pytest.raises(ConfigError, match=r"max_pixels \(5\) must be >= min_pixels"):  # YAML: the same checks
        from_mapping(model_cli.ModelInitConfig, {"out": str(tmp_path), "min_pixels": 10, "max_pixels": 5})


def test_one_schema_the_library_spec_is_the_commands(tmp_path, capsys):
    """`model init` nests TinyModelSpec: its fields are the command's flags and YAML keys, with help."""
    from guiagent.config import ConfigError, from_mapping, parse_config

    cfg = parse_config(model_cli.ModelInitConfig, ["--out", str(tmp_path), "--size", "small", "--max-pixels", "50176"])
    assert cfg.spec == TinyModelSpec(size="small", max_pixels=50176)
    y = tmp_path / "c.yaml"
    y.write_text("out: x\nfamily: qwen3_vl\nseed: 3\n")
    assert parse_config(model_cli.ModelInitConfig, ["--config", str(y)]).spec == TinyModelSpec(family="qwen3_vl", seed=3)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['colour'\].*'max_pixels'"):
        from_mapping(model_cli.ModelInitConfig, {"out": "x", "colour": 1})
    with pytest.raises(SystemExit):
        parse_config(model_cli.ModelInitConfig, ["--help"])
    out = capsys.readouterr().out
    for flag in ("--size", "--family", "--seed", "--vocab-size", "--min-pixels", "--max-pixels", "--out"):
        assert flag in out
    assert "image processor upper pixel limit" in out and "--spec" not in out


def test_copy_warmup_trains_on_the_repeat_deterministically(tiny_model_dir):
    """--copy-steps: the model is trained on runs of random tokens written twice; the same seed gives the
    same weights, and the warm-up reports its loss and copy accuracy."""
    import random

    import torch
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from guiagent.policy.tiny import COPY_RUN, _copy_batch, copy_warmup

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    models = [AutoModelForImageTextToText.from_pretrained(tiny_model_dir, dtype=torch.float32) for _ in range(3)]
    before = {k: v.clone() for k, v in models[2].state_dict().items()}
    a, b = (copy_warmup(m, tok, 4, seed=1) for m in models[:2])
    assert a["steps"] == 4 and {**a, "seconds": 0} == {**b, "seconds": 0}
    assert a["loss_last"] < a["loss_first"] and 0.0 <= a["copy_accuracy"] <= 1.0
    sa, sb = models[0].state_dict(), models[1].state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], before[k]) for k in sa)  # trained: no longer the initialisation
    assert not models[0].training  # left ready to generate
    # what it trains on: the run again after a gap, labels only where the run can be copied
    x, y, mask = _copy_batch(random.Random(0), list(range(10, 50)), 4, 0)
    for row, labels, m in zip(x.tolist(), y.tolist(), mask.tolist()):
        n = sum(m)
        scored = [i for i, v in enumerate(labels) if v != -100]
        run_len = len(scored) + 1
        assert COPY_RUN[0] <= run_len <= COPY_RUN[1] and scored[-1] == n - 1
        run = row[n - run_len:n]
        assert [labels[i] for i in scored] == run[1:]
        assert any(row[k:k + run_len] == run for k in range(0, n - 2 * run_len + 1))  # written before
    with pytest.raises(ValueError, match="copy_steps"):
        TinyModelSpec(copy_steps=-1)
    with pytest.raises(ValueError, match="copy_until"):
        TinyModelSpec(copy_until=1.5)
    cfg = model_cli.parse_config(model_cli.ModelInitConfig, ["--out", "x", "--copy-steps", "1000", "--words", "bare",
                                                             "--copy-until", "0.9"])
    assert cfg.spec == TinyModelSpec(copy_steps=1000, words="bare", copy_until=0.9)


def test_copy_repeats_train_on_runs_of_a_few_short_tokens_after_the_warm_up(tiny_model_dir):
    """--copy-repeats: after the warm-up's first part, steps whose batches hold half rows drawn from a few
    one- and two-letter pieces (tokens repeat inside a run); reported apart, deterministic, refused
    without the first part."""
    import random

    import torch
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from guiagent.policy.tiny import COPY_REPEAT_ALPHABET, _mixed_batch, _short_pieces, copy_warmup

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    models = [AutoModelForImageTextToText.from_pretrained(tiny_model_dir, dtype=torch.float32) for _ in range(2)]
    a, b = (copy_warmup(m, tok, 2, seed=1, repeats=3) for m in models)
    assert a["steps"] == 2 and a["repeat_steps"] == 3 and 0.0 <= a["repeat_accuracy"] <= 1.0
    assert {**a, "seconds": 0} == {**b, "seconds": 0}
    assert "repeat_steps" not in copy_warmup(models[0], tok, 1, seed=1)
    vocab = list(range(len(tok)))
    short = _short_pieces(tok, vocab)
    assert len(short) >= COPY_REPEAT_ALPHABET[0]
    assert all(1 <= len(tok.convert_ids_to_tokens(i).lstrip("Ġ")) <= 2 for i in short)
    x, y, mask = _mixed_batch(random.Random(0), [i for i in vocab if i not in short], short, 8, tok.pad_token_id)
    assert x.shape[0] == 8 and x.shape == y.shape == mask.shape
    rows = [set(r[:int(m.sum())]) for r, m in zip(x.tolist(), mask)]
    few = [r for r in rows if r <= set(short)]
    assert len(few) == 4 and len(set().union(*few)) <= COPY_REPEAT_ALPHABET[1]
    with pytest.raises(ValueError, match="copy_repeats"):
        TinyModelSpec(copy_repeats=200)
    assert TinyModelSpec(copy_steps=1000, copy_repeats=200).copy_repeats == 200
    cfg = model_cli.parse_config(model_cli.ModelInitConfig, ["--out", "x", "--copy-steps", "10", "--copy-repeats", "5"])
    assert cfg.spec == TinyModelSpec(copy_steps=10, copy_repeats=5)


def test_copy_warmup_stops_where_its_probe_reaches_the_accuracy(tiny_model_dir, monkeypatch):
    """--copy-until: the warm-up checks a fixed probe every COPY_CHECK_EVERY steps and stops at the first
    check that reaches the accuracy (the step the circuit forms moves with the seed and the machine)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from guiagent.policy import tiny

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir, dtype=torch.float32)
    checks: list[int] = []
    real = tiny._copy_accuracy

    def probe(m, batch):  # the second check reaches it (the final figure is the real measurement)
        if len(batch[0]) == 16:
            checks.append(len(checks) + 1)
            return 0.95 if len(checks) == 2 else 0.1
        return real(m, batch)

    monkeypatch.setattr(tiny, "_copy_accuracy", probe)
    monkeypatch.setattr(tiny, "COPY_CHECK_EVERY", 2)
    info = tiny.copy_warmup(model, tok, 50, seed=3, until=0.9)
    assert info["steps"] == 4 and checks == [1, 2] and 0.0 <= info["copy_accuracy"] <= 1.0
    assert not model.training
    assert tiny.copy_warmup(model, tok, 3, seed=3)["steps"] == 3  # without until, every step runs


@pytest.mark.slow
def test_copy_warmup_forms_the_copy_circuit(tmp_path):
    """1,000 steps take the tiny model from ~1% to most of a repeated random run copied (~4 min)."""
    info = model_cli.init(model_cli.ModelInitConfig(out=str(tmp_path / "m"), spec=TinyModelSpec(copy_steps=1000),
                                                    check=False))
    assert info["copy_warmup"]["copy_accuracy"] > 0.9, info["copy_warmup"]


def test_init_refuses_a_folder_holding_files_unless_overwrite(tmp_path, capsys):
    """An --out holding an earlier model or run is refused before anything is built (one line, exit
    2, the folder as it was); --overwrite writes over it."""
    out = tmp_path / "taken"
    out.mkdir()
    (out / "config.yaml").write_text("iterations: 3\n")
    from guiagent.cli.main import main

    assert main(["model", "init", "--size", "tiny", "--out", str(out), "--no-check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"guiagent model: --out {out}: holds files already (an earlier model or run); give a new or "
                   "empty folder, or --overwrite to write over it"), err
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml"]
    assert main(["model", "init", "--size", "tiny", "--out", str(out), "--no-check", "--overwrite"]) == 0
    assert (out / "config.json").is_file() and (out / "config.yaml").read_text() == "iterations: 3\n"
