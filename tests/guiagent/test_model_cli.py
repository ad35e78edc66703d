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
