"""``guiagent model init``: build a tiny random-initialised Qwen-VL model offline.

    guiagent model init --size tiny --out runs/tiny [--family qwen2_5_vl|qwen3_vl] [--seed 0] [--overwrite] [--json]

The folder loads with the same ``from_pretrained`` path as a real checkpoint
(``guiagent eval --agent model --model runs/tiny``).
"""

from __future__ import annotations

import io
import os
import sys
import time
from dataclasses import dataclass, field

from PIL import Image

from guiagent.cli._common import check_out_free, emit_json, log, validate_out_dir
from guiagent.config import Flat, parse_config
from guiagent.policy.base import SamplingParams, message
from guiagent.policy.tiny import TinyModelSpec, build_tiny_model

USAGE = """usage: guiagent model init --size tiny|small --out DIR [--family qwen2_5_vl|qwen3_vl] [--seed N] [--overwrite] [--json]

subcommands:
  init   build a tiny random-initialised Qwen2.5-VL/Qwen3-VL-architecture model offline"""


@dataclass(frozen=True)
class ModelInitConfig:
    """Build a tiny random-initialised Qwen-VL-architecture model, its tokenizer and processor, offline."""

    out: str = ""
    """folder to write the model to (created; a new or empty one)"""
    overwrite: bool = False
    """write into an --out that holds files already (an earlier model's are replaced, others stay)"""
    spec: Flat[TinyModelSpec] = field(default_factory=TinyModelSpec)
    """what to build (its fields are this command's --size, --family, --seed, --vocab-size,
    --min-pixels, --max-pixels, --words, --copy-steps, --copy-until, --copy-repeats)"""
    check: bool = True
    """reload the saved folder and generate a few tokens to prove it works"""
    json: bool = False
    """print one JSON object as the last stdout line"""

    def __post_init__(self) -> None:
        if not self.out:
            raise ValueError("--out DIR is required (the folder to write the model to)")


def init(cfg: ModelInitConfig) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    t0 = time.perf_counter()
    spec = cfg.spec
    log(f"building {spec.family} {spec.size} (seed {spec.seed}) in {cfg.out}")
    info = build_tiny_model(spec, cfg.out)
    info["build_s"] = round(time.perf_counter() - t0, 2)
    if cfg.check:
        from guiagent.policy.hf import load_transformers  # lazy: torch (2 s), for --check only

        buf = io.BytesIO()
        Image.new("RGB", (112, 112), "white").save(buf, format="PNG")
        policy = load_transformers(cfg.out, device="cpu")
        [g] = policy.generate([[message("user", buf.getvalue(), "Say something.")]],
                              SamplingParams(max_new_tokens=4, temperature=0))
        info["check"] = {"generated_tokens": len(g.token_ids), "text": g.text}
    log(f"built {info['params']:,} parameters, vocabulary {info['vocab_size']}, in {info['build_s']} s")
    return info


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    sub, rest = argv[0], argv[1:]
    if sub != "init":
        print(f"guiagent model: unknown subcommand {sub!r}\n\n{USAGE}", file=sys.stderr)
        return 2

    cfg = parse_config(ModelInitConfig, rest, prog="guiagent model init")
    validate_out_dir(cfg.out)  # before minutes of building
    check_out_free(cfg.out, overwrite=cfg.overwrite)
    info = init(cfg)
    print(f"model written to {info['out']} ({info['family']}, {info['size']}, {info['params']:,} parameters)")
    if cfg.json:
        emit_json(info)
    return 0
