"""Numbers are written with ASCII digits: ``--episodes ٣`` (Arabic-Indic three) or ``３`` (full width)
was taken as 3 by Python's ``int``. Every integer and float flag refuses them in one line, and so does
every YAML value (YAML numbers are ASCII: such a value is text, refused where a number belongs)."""

import typing

import pytest

import guiagent.config as gc
from guiagent.config import ConfigError, parse_config

DIGITS = ["٣", "３", "১", "٣.٥", "1٣"]


def _numeric_flags(cls) -> list[str]:
    """The flags of ``cls`` whose setting is an int or a float (or holds them: ``int | None``, a tuple, a
    mapping to numbers)."""
    def hint(c, name):
        hints = typing.get_type_hints(c)
        if name in hints:
            return hints[name]
        for sub in gc._flat_fields(c).values():
            found = hint(sub, name)
            if found is not None:
                return found
        return None

    def holds_number(tp) -> bool:
        return tp in (int, float) or any(holds_number(a) for a in typing.get_args(tp))

    out = []
    for flag, key in gc._flags(cls).items():
        c = cls
        *path, last = key.split(".")
        for p in path:
            c = hint(c, p)
        tp = hint(c, last)
        if holds_number(tp) and tp is not bool:
            out.append(flag)
            if _is_mapping(tp):
                MAPPINGS.add(flag)
    return out


#: the numeric flags that take KEY VALUE pairs
MAPPINGS: set[str] = set()


def _is_mapping(tp) -> bool:
    return typing.get_origin(tp) is dict or any(_is_mapping(a) for a in typing.get_args(tp))


def _eval_config():
    from guiagent.cli.eval import EvalConfig

    return EvalConfig


def _train_config():
    from rl.config import TrainConfig

    return TrainConfig


def _refuses(cls, flag, digits):
    words = ["webapps", digits] if flag in MAPPINGS else [digits]
    # a KEY VALUE flag: tyro's own words for the pair it could not read
    said = r"is not (a whole number|a number) \(digits 0-9 only\)"
    with pytest.raises(ConfigError, match=f"{said}|Failed to parse key-value pairs" if flag in MAPPINGS else said):
        parse_config(cls, [flag, *words])


def test_numeric_flags_of_eval_refuse_unicode_digits():
    cls = _eval_config()
    flags = _numeric_flags(cls)
    assert {"--episodes", "--seed", "--max-steps"} <= set(flags)
    for flag in ["--episodes", "--seed", "--max-steps", *flags[::4]]:  # every one, every digit: -m slow
        _refuses(cls, flag, DIGITS[0])


@pytest.mark.slow
@pytest.mark.parametrize("digits", DIGITS)
def test_every_numeric_flag_of_eval_refuses_unicode_digits(digits):
    cls = _eval_config()
    for flag in _numeric_flags(cls):
        _refuses(cls, flag, digits)


def test_numeric_flags_of_train_refuse_unicode_digits():
    cls = _train_config()
    flags = _numeric_flags(cls)
    assert len(flags) > 50
    for flag in ["--iterations", "--seed", "--lr", "--env-weights", *flags[::40]]:  # all of them: -m slow
        _refuses(cls, flag, "٣")


@pytest.mark.slow
def test_every_numeric_flag_of_train_refuses_unicode_digits():
    cls = _train_config()
    for flag in _numeric_flags(cls):
        _refuses(cls, flag, "٣")


def test_ascii_numbers_still_read():
    cfg = parse_config(_eval_config(), ["--episodes", "3", "--seed", "0"])
    assert (cfg.episodes, cfg.seed) == (3, 0)
    cfg = parse_config(_train_config(), ["--lr", "3e-4", "--iterations", "2"])
    assert (gc.flat_values(cfg)["lr"], cfg.iterations) == (3e-4, 2)


@pytest.mark.parametrize("text", ["episodes: ٣\n", "episodes: ３\n", 'episodes: "٣"\n', "max_steps: ١٠\n"])
def test_yaml_values_refuse_unicode_digits(tmp_path, text):
    (tmp_path / "c.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"c\.yaml: (episodes|max_steps): .* is not valid \(expected an integer( \| null)?\)"):
        parse_config(_eval_config(), ["--config", str(tmp_path / "c.yaml")])


def test_yaml_float_refuses_unicode_digits(tmp_path):
    (tmp_path / "c.yaml").write_text("lr: ١e-4\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"lr: .* is not valid \(expected a number\)"):
        parse_config(_train_config(), ["--config", str(tmp_path / "c.yaml")])


def test_the_cli_says_it_in_one_line(capsys):
    from guiagent.cli.main import main

    assert main(["eval", "--episodes", "٣", "--env", "webapps", "--out", "/nonexistent/x"]) == 2
    assert capsys.readouterr().err.strip() == "guiagent eval: --episodes: '٣' is not a whole number (digits 0-9 only)"
