"""The CLI: every command answers --help; configs load from YAML and flags; shipped configs load."""

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from guiagent.cli.main import COMMANDS, main
from guiagent.config import ConfigError, from_mapping, load_yaml, parse_config, to_mapping

ROOT = Path(__file__).resolve().parents[2]


def test_top_level_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("tasks", "eval", "model", "sft", "train", "ui", "farm"):
        assert name in out


def test_unknown_command_is_an_error(capsys):
    assert main(["fly"]) == 2
    assert "unknown command" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["tasks", "--help"], ["tasks", "list", "--help"], ["eval", "--help"],
                                  ["model", "--help"], ["model", "init", "--help"], ["sft", "--help"],
                                  ["train", "--help"], ["ui", "--help"], ["farm", "--help"]])
def test_every_command_has_help(argv):
    r = subprocess.run([sys.executable, "-m", "guiagent", *argv], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "usage" in (r.stdout + r.stderr).lower()


def test_tasks_list_json_is_a_list_of_ids():
    r = subprocess.run([sys.executable, "-m", "guiagent", "tasks", "list", "--env", "webapps", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ids = json.loads(r.stdout.strip().splitlines()[-1])
    assert isinstance(ids, list) and len(ids) >= 40 and "open_app" in ids


def test_tasks_list_androidworld_without_the_package_is_one_clear_line():
    r = subprocess.run([sys.executable, "-m", "guiagent", "tasks", "list", "--env", "androidworld"],
                       capture_output=True, text=True, timeout=120)
    try:
        import android_world  # noqa: F401
        pytest.skip("android_world is installed here")
    except ImportError:
        pass
    assert r.returncode == 1
    assert "android_world" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@dataclass
class Inner:
    """inner"""

    lr: float = 0.1
    """learning rate"""
    names: tuple[str, ...] = ()


@dataclass
class Outer:
    """outer"""

    steps: int = 3
    inner: Inner = field(default_factory=Inner)
    flag: bool = False

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError("steps must be >= 0; pass --steps 0 or more")


def test_yaml_then_flags_override(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("steps: 7\ninner:\n  lr: 0.5\n  names: [a, b]\n")
    cfg = parse_config(Outer, ["--config", str(cfg_file), "--inner.lr", "0.25", "--flag"])
    assert cfg == Outer(steps=7, inner=Inner(lr=0.25, names=("a", "b")), flag=True)
    assert to_mapping(cfg) == {"steps": 7, "inner": {"lr": 0.25, "names": ["a", "b"]}, "flag": True}


def test_yaml_unknown_key_names_the_valid_ones(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("inner:\n  lrr: 1\n")
    with pytest.raises(ConfigError, match=r"inner\.: unknown key\(s\) \['lrr'\]; valid keys: \['lr', 'names'\]"):
        load_yaml(Outer, f)


def test_post_init_errors_surface_as_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="steps must be >= 0"):
        from_mapping(Outer, {"steps": -1})
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(Outer, tmp_path / "missing.yaml")


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    from rl.config import TrainConfig
    from rl.evaluate import EvalConfig

    cls = TrainConfig if path.name.startswith("train") else EvalConfig
    cfg = load_yaml(cls, path)
    assert isinstance(cfg, cls)
