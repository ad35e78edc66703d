"""Config files and flags together (``--config FILE`` plus flags): the file's values are checked one by
one, the flags go on top, and the config is built once; numbers as YAML 1.2 and JSON write them;
duplicate keys, a setting given two ways and an empty ``--config`` refused in one line; refusals name
the setting as the user gave it (the file's key, or a flag the command has)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guiagent.config import ConfigError, from_mapping, load_yaml, parse_config


def _file(tmp_path: Path, text: str, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _refusal(call) -> str:
    with pytest.raises(ConfigError) as e:
        call()
    message = str(e.value)
    assert message and "\n" not in message
    return message


# -- 1. a file completed by flags: merged first, checked and built once -----------------------------


def test_a_judge_eval_file_is_completed_by_the_judge_model_flag(tmp_path):
    from guiagent.cli.judge import JudgeEvalConfig

    f = _file(tmp_path, "votes: 3\ntemperature: 0.7\nbatch: 4\n")
    cfg = parse_config(JudgeEvalConfig, ["--config", f, "--judge-model", "http://127.0.0.1:8000/v1"])
    assert (cfg.judge_model, cfg.votes, cfg.temperature, cfg.batch) == ("http://127.0.0.1:8000/v1", 3, 0.7, 4)
    # flags win over the file; the check across settings sees the merged values
    assert parse_config(JudgeEvalConfig, ["--config", f, "--judge-model", "m", "--votes", "1"]).votes == 1
    message = _refusal(lambda: parse_config(JudgeEvalConfig, ["--config", f, "--judge-model", "m",
                                                              "--temperature", "0"]))
    assert "--votes 3 at --temperature 0" in message and message.startswith(f"{f}: votes: ")
    assert "--judge-model is required" in _refusal(lambda: parse_config(JudgeEvalConfig, ["--config", f]))


def test_a_data_import_file_is_completed_by_the_positional_source(tmp_path):
    from guiagent.cli.data import DataImportConfig

    f = _file(tmp_path, f"format: uis1\nout: {tmp_path / 'out'}\n")
    cfg = parse_config(DataImportConfig, ["--config", f, "ds/good"])
    assert (cfg.src, cfg.format, cfg.out) == ("ds/good", "uis1", str(tmp_path / "out"))
    assert parse_config(DataImportConfig, ["--config", _file(tmp_path, "src: ds/a\nformat: uis1\n", "s.yaml")]
                        ).src == "ds/a"
    message = _refusal(lambda: parse_config(DataImportConfig, ["--config", f], prog="guiagent data import"))
    assert message == "missing SRC (see guiagent data import --help)"
    # the file alone, built as a whole: the missing key named, not a Python signature
    assert _refusal(lambda: load_yaml(DataImportConfig, f)) == f"{f}: DataImportConfig: missing required key(s) src"


def test_a_check_across_settings_sees_the_flags_on_top_of_the_file(tmp_path):
    """``--mode auto`` resolves once, from the file and the flags: a file without a model plus
    ``--model`` is an online run (the file alone built first resolved it to staged, and ``--model``
    was then refused for want of --data)."""
    from rl.config import TrainConfig

    f = _file(tmp_path, "iterations: 3\n")
    cfg = parse_config(TrainConfig, ["--config", f, "--model", "some/model"])
    assert (cfg.iterations, cfg.mode, cfg.model) == (3, "online", "some/model")
    assert parse_config(TrainConfig, ["--config", f]).mode == "staged"


def test_a_file_giving_part_of_a_section_keeps_the_commands_own_defaults_for_the_rest(tmp_path):
    """``guiagent eval`` samples greedily on one in-process slot by default; a file that sets ``top_p``
    or ``workers`` keeps that (it reset the whole section to the class's defaults: temperature 1, ray)."""
    from rl.evaluate import EvalConfig

    f = _file(tmp_path, "top_p: 0.9\nworkers: 3\n")
    for cfg in (load_yaml(EvalConfig, f), parse_config(EvalConfig, ["--config", f])):
        assert (cfg.sampling.top_p, cfg.sampling.temperature, cfg.sampling.max_new_tokens) == (0.9, 0.0, 96)
        assert (cfg.fleet.workers, cfg.fleet.slots, cfg.fleet.pool) == (3, 1, "inprocess")


# -- 2. numbers as YAML 1.2 and JSON write them -----------------------------------------------------


@pytest.mark.parametrize("text, lr", [
    ("lr: 3e-4\n", 3e-4), ("lr: 1E-4\n", 1e-4), ("lr: +1e3\n", 1e3), ("lr: 1.0e4\n", 1e4), ("lr: 5e-1\n", 0.5),
    ('{"lr": 1e-4}\n', 1e-4), ('{"update": {"lr": 2.5E-5}}\n', 2.5e-5), ("lr: 0.0003\n", 3e-4),
])
def test_exponent_floats_read_as_numbers(tmp_path, text, lr):
    from rl.config import TrainConfig

    f = _file(tmp_path, text)
    assert load_yaml(TrainConfig, f).update.lr == lr
    assert parse_config(TrainConfig, ["--config", f]).update.lr == lr


def test_numbers_in_mappings_and_lists_of_numbers(tmp_path):
    from rl.config import TrainConfig

    cfg = load_yaml(TrainConfig, _file(tmp_path, "env: webapps,miniwob\nenv_weights: {webapps: 2e0, miniwob: 1E0}\n"))
    assert cfg.env_weights == {"webapps": 2.0, "miniwob": 1.0}


@pytest.mark.parametrize("text, message", [
    ('lr: "3e-4"\n', "lr: '3e-4' is not valid (expected a number)"),  # quoted: a string, as "4" is
    ("lr: 3e-4x\n", "lr: '3e-4x' is not valid (expected a number)"),
    ("lr: 1e400\n", "lr: inf is not a finite number"),
    ("lr: .nan\n", "lr: nan is not a valid value"),
    ("lr: nan\n", "lr: 'nan' is not valid (expected a number)"),
    ("lr: true\n", "lr: True is not valid (expected a number)"),
    ("iterations: 1e3\n", "iterations: '1e3' is not valid (expected an integer)"),
    ("seed: 1e3\n", "seed: '1e3' is not valid (expected an integer)"),
])
def test_what_is_not_a_number_stays_refused(tmp_path, text, message):
    from rl.config import TrainConfig

    assert message in _refusal(lambda: load_yaml(TrainConfig, _file(tmp_path, text)))


def test_an_exponent_where_text_belongs_stays_the_text_written(tmp_path):
    from rl.evaluate import EvalConfig

    cfg = load_yaml(EvalConfig, _file(tmp_path, "name: 1e3\ntasks: [2e5]\n"))
    assert (cfg.name, cfg.tasks) == ("1e3", ("2e5",))
    assert type(cfg.name) is str


# -- 3. a key given twice -------------------------------------------------------------------------


@pytest.mark.parametrize("text, key, lines", [
    ("iterations: 1\niterations: 2\n", "'iterations'", "lines 1 and 2"),
    ("seed: 1\nsemi:\n  gamma: 0.5\n  gamma: 0.7\n", "'gamma'", "lines 3 and 4"),
    ('{"lr": 0.1,\n "lr": 0.2}\n', "'lr'", "lines 1 and 2"),
    ("update: {epochs: 1, epochs: 2}\n", "'epochs'", "lines 1 and 1"),
])
def test_a_key_given_twice_is_refused_naming_it(tmp_path, text, key, lines):
    from rl.config import TrainConfig

    f = _file(tmp_path, text)
    for call in (lambda: load_yaml(TrainConfig, f), lambda: parse_config(TrainConfig, ["--config", f])):
        assert _refusal(call) == f"config file {f}: key {key} is given twice in one mapping ({lines}); keep one"


def test_a_json_config_file_is_read_as_json(tmp_path):
    """A ``.json`` file: JSON's grammar (tab indents, which YAML refuses), numbers as JSON writes them,
    each key once in an object."""
    import json

    from rl.config import TrainConfig

    f = _file(tmp_path, json.dumps({"lr": 1e-4, "update": {"epochs": 3}, "seed": 5}, indent="\t"), "c.json")
    cfg = parse_config(TrainConfig, ["--config", f, "--seed", "6"])
    assert (cfg.update.lr, cfg.update.epochs, cfg.seed) == (1e-4, 3, 6)
    f = _file(tmp_path, '{"iterations": 1,\n "iterations": 2}', "dup.json")
    assert _refusal(lambda: load_yaml(TrainConfig, f)) == (
        f"config file {f}: key 'iterations' is given twice in one object; keep one")
    f = _file(tmp_path, '{"semi": {"gamma": 0.1, "gamma": 0.1}}', "dup2.json")
    assert "key 'gamma' is given twice" in _refusal(lambda: load_yaml(TrainConfig, f))


@pytest.mark.parametrize("text, message", [
    ('{"seed": 1,}', "is not valid JSON at line 1, column 12"),
    ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
    ('{"seed": ' + "1" * 5000 + "}", "holds a value that cannot be read"),
    ('{"lr": NaN}', "lr: nan is not a valid value"),
    ('{"lr": 1e400}', "lr: inf is not a finite number"),
    ('{"iterations": 1e3}', "iterations: 1000.0 is not valid (expected an integer)"),
    ('["lr"]', "expected a mapping of TrainConfig fields at the top, got list"),
])
def test_bad_json_is_one_line(tmp_path, text, message):
    from rl.config import TrainConfig

    f = _file(tmp_path, text, "c.json")
    assert message in _refusal(lambda: load_yaml(TrainConfig, f))


def test_a_merge_key_is_not_a_duplicate(tmp_path):
    from rl.config import TrainConfig

    assert load_yaml(TrainConfig, _file(tmp_path, "semi: {<<: {gamma: 0.3}, gamma: 0.4}\n")).semi.gamma == 0.4


def test_a_key_given_twice_is_one_line_exit_2_before_anything_is_created(tmp_path, capsys):
    from guiagent.cli.main import main

    f = _file(tmp_path, "episodes: 1\nepisodes: 2\n")
    assert main(["eval", "--config", f, "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"guiagent eval: config file {f}: key 'episodes' is given twice in one mapping (lines 1 and 2); keep one"]
    assert not (tmp_path / "e").exists()


# -- 4. a section's keys flat and under its name ----------------------------------------------------


@pytest.mark.parametrize("text", ["lr: 0.001\nupdate: {epochs: 3}\n", "update: {epochs: 3}\nlr: 0.001\n",
                                  "update: {epochs: 3, lr: 0.001}\nlr: 1e-3\n"])
def test_flat_keys_and_section_keys_merge(tmp_path, text):
    from rl.config import TrainConfig

    f = _file(tmp_path, text)
    for cfg in (load_yaml(TrainConfig, f), parse_config(TrainConfig, ["--config", f])):
        assert (cfg.update.lr, cfg.update.epochs) == (0.001, 3)


@pytest.mark.parametrize("text, message", [
    ("lr: 0.001\nupdate: {lr: 0.002}\n", "lr and update.lr are one setting, given two values (0.001 and 0.002)"),
    ("update: {lr: 0.002}\nlr: 0.001\n", "update.lr and lr are one setting, given two values (0.002 and 0.001)"),
    # a mapping-valued setting is one value: two different mappings are refused, not merged
    ("device: {marks: 'true'}\nfleet: {device: {tree: none}}\n",
     "device and fleet.device are one setting, given two values ({'marks': 'true'} and {'tree': 'none'})"),
])
def test_one_setting_given_two_ways_with_two_values_is_refused(tmp_path, text, message):
    from rl.config import TrainConfig

    f = _file(tmp_path, text)
    assert _refusal(lambda: load_yaml(TrainConfig, f)) == f"{f}: {message}: give it once"
    assert _refusal(lambda: parse_config(TrainConfig, ["--config", f])) == f"{f}: {message}: give it once"


def test_flat_keys_and_section_keys_merge_in_python_too():
    from rl.config import TrainConfig

    cfg = TrainConfig.build(lr=0.001, update={"epochs": 3})
    assert (cfg.update.lr, cfg.update.epochs) == (0.001, 3)
    assert "give it once" in _refusal(lambda: TrainConfig.build(lr=0.001, update={"lr": 0.002}))


# -- 5. a refusal names the setting as the user gave it -------------------------------------------


def test_a_judge_eval_file_value_is_named_by_its_key_and_the_commands_flag(tmp_path):
    from guiagent.cli.judge import JudgeEvalConfig

    f = _file(tmp_path, "judge_model: http://127.0.0.1:8000/v1\ntimeout: -1\n")
    message = _refusal(lambda: parse_config(JudgeEvalConfig, ["--config", f]))
    assert message == f"{f}: timeout: --timeout must be > 0 (seconds), got -1.0"
    message = _refusal(lambda: parse_config(JudgeEvalConfig, ["--judge-model", "m", "--timeout", "-1"]))
    assert message == "--timeout must be > 0 (seconds), got -1.0"
    # the flag given on top of the file is what is refused: no file key named
    message = _refusal(lambda: parse_config(JudgeEvalConfig, ["--config", f, "--timeout", "0"]))
    assert message == "--timeout must be > 0 (seconds), got 0.0"
    assert _refusal(lambda: load_yaml(JudgeEvalConfig, f)) == f"{f}: timeout: --timeout must be > 0 (seconds), got -1.0"


def test_a_train_files_judge_value_is_named_by_its_key_path(tmp_path):
    from rl.config import TrainConfig

    f = _file(tmp_path, "judge: {timeout: -1}\n")
    assert _refusal(lambda: parse_config(TrainConfig, ["--config", f])) == (
        f"{f}: judge.timeout: --judge.timeout must be > 0 (seconds), got -1.0")
    assert _refusal(lambda: parse_config(TrainConfig, ["--judge.timeout", "-1"])) == (
        "--judge.timeout must be > 0 (seconds), got -1.0")


def test_an_unknown_option_is_quoted_as_typed(tmp_path):
    from guiagent.cli.judge import JudgeEvalConfig

    message = _refusal(lambda: parse_config(JudgeEvalConfig, ["--judge-model", "m", "--judge.timeout", "5"],
                                            prog="guiagent judge eval"))
    assert message == "unrecognized option(s) --judge.timeout 5 (see guiagent judge eval --help)"


# -- 6. --config with no path ----------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--config="], "--config needs a YAML file path, got an empty one"),
    (["--config", ""], "--config needs a YAML file path, got an empty one"),
    (["--config", " "], "--config needs a YAML file path, got an empty one"),
    (["--config"], "--config needs a YAML file path"),
    (["--config=a.yaml", "--config", "b.yaml"], "--config is given twice (a.yaml and b.yaml): give one file"),
])
def test_a_config_flag_without_one_path_is_refused(argv, message):
    from rl.evaluate import EvalConfig

    assert _refusal(lambda: parse_config(EvalConfig, argv)) == message


def test_an_empty_config_path_stops_train_before_anything_is_created(tmp_path, capsys):
    from guiagent.cli.main import main

    out = tmp_path / "run"
    # (--env nosuch: were the empty path read as no file, the one line would be another, and nothing would run)
    assert main(["train", "--config=", "--env", "nosuch", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "guiagent train: --config needs a YAML file path, got an empty one"]
    assert not out.exists()


# -- 7. a section named as it is written --------------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ("semi: {foo: 1}\n", "semi: unknown key(s) ['foo']; valid keys: ["),
    ("semi: {patch: {foo: 1}}\n", "semi.patch: unknown key(s) ['foo']; valid keys: ["),
    ("update: {lrr: 1}\n", "update: unknown key(s) ['lrr']; valid keys: ["),
    ("semi: {gamma: 2}\n", "semi.gamma: --semi.gamma must lie in [0, 1]"),
    ("semi: {patch: {budget: -5}}\n", "semi.patch: patch budget must be >= 0, or -1 for no limit"),
])
def test_a_section_is_named_without_a_stray_dot(tmp_path, text, message):
    from rl.config import TrainConfig

    f = _file(tmp_path, text)
    refused = _refusal(lambda: load_yaml(TrainConfig, f))
    assert refused.startswith(f"{f}: {message}") and ".:" not in refused
    assert ".:" not in _refusal(lambda: from_mapping(TrainConfig, {"semi": {"foo": 1}}))


def test_a_sections_check_that_names_no_flag_names_its_section(tmp_path):
    """PatchConfig's own check names no flag: the refusal says which section, and which file set it."""
    from rl.config import TrainConfig

    f = _file(tmp_path, "semi: {patch: {budget: -5}}\n")
    rule = "semi.patch: patch budget must be >= 0, or -1 for no limit"
    assert _refusal(lambda: parse_config(TrainConfig, ["--config", f])) == f"{f}: {rule}"
    assert _refusal(lambda: parse_config(TrainConfig, ["--semi.patch.budget", "-5"])) == rule
    assert _refusal(lambda: parse_config(TrainConfig, ["--config", f, "--semi.patch.budget", "-3"])) == rule
