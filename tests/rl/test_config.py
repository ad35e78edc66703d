"""The training config refuses a setting the user gives that the run leaves unused, naming it in one line.

"Given" means set by the user (a flag, a key of a --config file, a field passed to TrainConfig.build),
whatever its value; the class defaults and the embedded recipe's values are never refused, nor a config
file's key at the value the run would take without it (a run's own config.yaml writes every setting out,
and feeds back as --config to repeat the run)."""

from pathlib import Path

import pytest

from guiagent.config import ConfigError, flat_values, parse_config, read_yaml
from rl.config import EMBEDDED_RECIPE, STAGED_ONLY, TrainConfig, embedded_recipe

SEMI = dict(mode="semi-online", data=("x",), model="m")
YAML = Path(__file__).resolve().parents[2] / "configs" / "train_webapps_tiny.yaml"


@pytest.mark.parametrize("kwargs, flag", [
    # --advantage and --neg-adv-min-scale: grpo's and dr_grpo's only, and no semi-online iteration's
    (dict(algo="gigpo", advantage="step"), "--advantage"),
    (dict(algo="ppo", advantage="step"), "--advantage"),
    (dict(algo="awr", advantage="step"), "--advantage"),
    (dict(algo="gigpo", neg_adv_min_scale=0.5), "--neg-adv-min-scale"),
    (dict(algo="ppo", neg_adv_min_scale=0.5), "--neg-adv-min-scale"),
    (dict(algo="awr", neg_adv_min_scale=0.5), "--neg-adv-min-scale"),
    (dict(SEMI, advantage="step"), "--advantage"),
    (dict(SEMI, neg_adv_min_scale=0.5), "--neg-adv-min-scale"),
    # AWR's weighted regression has no ratio: no clip range, no KL term
    (dict(algo="awr", clip_eps_low=0.1), "--clip-eps-low"),
    (dict(algo="awr", clip_eps_high=0.4), "--clip-eps-high"),
    (dict(algo="awr", kl_reference="stage"), "--kl-reference"),
    # semi-online replays: their returns, rewards and budget are the matcher's, and they take no env step
    (dict(SEMI, gamma=0.9), "--gamma"),
    (dict(SEMI, rewards={"task": 2.0}), "--rewards.task"),
    (dict(SEMI, rewards={"parse_penalty": -0.5}), "--rewards.parse-penalty"),
    (dict(SEMI, max_env_steps=100), "--max-env-steps"),
    (dict(SEMI, horizon_schedule="0:3"), "--horizon-schedule"),
    # a section or a feature the run does not have
    (dict(model="m", semi={"iterations": 2}), "--semi.iterations"),
    (dict(model="m", semi={"patch": {"mode": "none"}}), "--semi.patch.mode"),
    (dict(model="m", mode="mixed", data=("x",), semi={"iterations": 2}), "--semi.iterations"),
    (dict(mode="staged", semi={"per_online": 2}), "--semi.per-online"),
    (dict(model="m", gamma=0.9), "--gamma"),  # grpo's episode advantage has no step returns
    (dict(model="m", kl_coef=0.1, kl_reference="stage"), "--kl-reference"),  # one stage
    (dict(model="m", kl_kind="k1"), "--kl-kind"),  # no KL term
    (dict(model="m", max_sampling_rounds=5), "--max-sampling-rounds"),  # no dynamic sampling
    (dict(model="m", algo="grpo", step_weight=0.5), "--step-weight"),  # gigpo's
    (dict(model="m", algo="grpo", awr_beta=0.5), "--awr-beta"),  # awr's
    (dict(model="m", algo="gigpo", value_clip=0.1), "--value-clip"),  # the critics'
])
def test_a_setting_the_run_leaves_unused_is_refused_naming_it(kwargs, flag):
    with pytest.raises(ConfigError) as e:
        TrainConfig.build(**kwargs)
    message = str(e.value)
    assert message.startswith(flag + " ") and "\n" not in message, message


def test_the_same_settings_where_they_are_used_are_taken():
    assert TrainConfig.build(algo="dr_grpo", model="m", advantage="step", gamma=0.9,
                             neg_adv_min_scale=0.5).credit.gamma == 0.9
    assert TrainConfig.build(algo="gigpo", model="m", gamma=0.9).credit.gamma == 0.9
    assert TrainConfig.build(algo="ppo", model="m", clip_eps_low=0.1, gae_lambda=0.9).update.clip_eps_low == 0.1
    assert TrainConfig.build(algo="awr", model="m", gamma=0.9, awr_beta=0.5, value_clip=0.1).awr.awr_beta == 0.5
    # a staged run's online stage reads the online settings; its replays read --semi.*
    staged = TrainConfig.build(mode="staged", advantage="step", gamma=0.9, max_env_steps=50, rewards={"task": 2.0},
                               kl_coef=0.1, kl_reference="stage", semi={"iterations": 2, "gamma": 0.3})
    assert (staged.credit.gamma, staged.rewards.task, staged.semi.gamma) == (0.9, 2.0, 0.3)
    assert TrainConfig.build(**SEMI, semi={"gamma": 0.3}).semi.gamma == 0.3
    assert TrainConfig.build(model="m", min_informative_groups=2, max_sampling_rounds=5).groups.max_sampling_rounds == 5


def test_given_means_set_by_the_user_not_a_value_other_than_the_default():
    """A flag whose value equals the default is still given (refused where unused); the embedded recipe's
    values are nobody's flags (never refused, whatever the algorithm a flag picks)."""
    with pytest.raises(ConfigError, match="^--clip-eps-low "):
        parse_config(TrainConfig, ["--model", "m", "--algo", "awr", "--clip-eps-low", "0.2"])  # the default
    with pytest.raises(ConfigError, match="^--gamma "):
        parse_config(TrainConfig, ["--model", "m", "--mode", "semi-online", "--data", "x", "--gamma", "1.0"])
    from guiagent.cli.train import parse_args  # what `guiagent train` runs: the embedded recipe under the flags

    assert parse_args(["--algo", "dr_grpo"]).algo == "dr_grpo"  # the webapps recipe is AWR's
    assert parse_args(["--env", "miniwob"]).update.kl_reference == "stage"  # the staged recipe's own
    with pytest.raises(ConfigError, match="^--gamma "):
        parse_args(["--algo", "dr_grpo", "--gamma", "0.9"])  # --advantage episode (the default)


def test_a_config_file_key_left_unused_is_named_by_its_file_and_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("algo: awr\nmodel: m\nclip_eps_high: 0.3\n")
    with pytest.raises(ConfigError) as e:
        parse_config(TrainConfig, ["--config", str(f)])
    assert str(e.value).startswith(f"{f}: clip_eps_high: --clip-eps-high is a setting of the PPO-clip loss"), e.value
    # the same key given again on the command line is named as the flag
    with pytest.raises(ConfigError, match="^--clip-eps-high "):
        parse_config(TrainConfig, ["--config", str(f), "--clip-eps-high", "0.2"])


def test_a_config_file_key_unused_at_the_value_the_run_takes_anyway_is_not_refused(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("algo: awr\nmodel: m\nclip_eps_high: 0.28\nrescore: 'off'\nadvantage: episode\n")
    cfg = parse_config(TrainConfig, ["--config", str(f)])
    assert cfg == TrainConfig.build(algo="awr", model="m")
    # the same values as flags are the user's own: refused where unused
    with pytest.raises(ConfigError, match="^--clip-eps-high "):
        parse_config(TrainConfig, ["--config", str(f), "--clip-eps-high", "0.28"])


@pytest.mark.parametrize("args", [
    [],  # the embedded default's recipe (online AWR from a warm start it builds)
    ["--env", "miniwob"],  # the staged Dr. GRPO recipe
    ["--algo", "awr", "--rename-targets", "0.5", "--targets", "seen", "--task-sampling", "learnability",
     "--no-replay-demos", "--temperature", "0.5"],
    ["--algo", "ppo", "--model", "m", "--gae-lambda", "0.9"],
])
def test_a_runs_own_config_yaml_feeds_back_to_repeat_the_run(tmp_path, args):
    """config.yaml, every setting written out (resolved ones too: --rescore, --loss-agg), is taken back
    whole as --config: with --model RUN/sft the run's RL stage runs again from its saved warm start with
    the run's own settings (without --config, --model leaves the embedded recipe out)."""
    from guiagent.cli.train import parse_args
    from rl.checkpoint import save_config
    from rl.plan import with_demos

    cfg = with_demos(parse_args([*args, "--out", str(tmp_path / "run")]), tmp_path / "run")  # as the run saves it
    save_config(tmp_path, cfg)
    again = parse_config(TrainConfig, ["--config", str(tmp_path / "config.yaml"), "--model", "sft"])
    assert again == TrainConfig.build(base=cfg, model="sft")


@pytest.mark.parametrize("env", ["webapps", "miniwob"])
def test_the_embedded_recipes_list_only_what_they_use(env):
    cfg = TrainConfig.embedded(env)
    unused = cfg.unused()
    keys = {k for k in embedded_recipe(env)} | {f"semi.{k}" for k in embedded_recipe(env).get("semi", {})}
    assert not [k for k in keys if k in unused or any(p.endswith(".") and k.startswith(p) for p in unused)]
    if env == "webapps":  # online AWR: the staged recipe's own settings are not in it, nor in its spelled-out file
        assert not set(STAGED_ONLY) & set(embedded_recipe(env)) and set(STAGED_ONLY) <= set(EMBEDDED_RECIPE)
        spelled = read_yaml(YAML)
        assert not {"semi", "clip_eps_low", "clip_eps_high", "kl_reference", "neg_adv_min_scale",
                    "max_sampling_rounds"} & set(spelled)
        assert parse_config(TrainConfig, ["--config", str(YAML)]) == cfg
        flat = flat_values(cfg)
        assert all(flat[k] == (tuple(v) if isinstance(v, list) else v) for k, v in spelled.items()
                   if k not in ("device", "rewards")), {k: (flat[k], v) for k, v in spelled.items() if k in flat}


def test_warm_start_mark_states_needs_the_marks_format():
    with pytest.raises(ValueError, match="--warm-start-mark-states lists .* give --action-format marks too"):
        TrainConfig.build(warm_start_mark_states=True)
    cfg = parse_config(TrainConfig, ["--env", "miniwob", "--action-format", "marks", "--device", "marks", "true",
                                     "--warm-start-mark-states"])
    assert cfg.warm_start.warm_start_mark_states is True


def test_renamed_targets_are_a_share_of_the_groups_of_a_seen_targets_run():
    """--rename-targets P: about P of each iteration's groups (whole groups) run renamed episodes; it needs
    --targets seen (a made-up name stands for a seen target) and a share in [0, 1]."""
    import random

    from rl.produce import Producer

    with pytest.raises(ValueError, match="give --targets seen too"):
        TrainConfig.build(rename_targets=0.5)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        TrainConfig.build(targets="seen", rename_targets=1.5)
    with pytest.raises(ValueError, match="renames the targets of online rollouts; --mode semi-online replays"):
        TrainConfig.build(mode="semi-online", data=("d",), targets="seen", rename_targets=0.5)
    seen: dict[str, set[str]] = {}

    def rollout(pool, sampler, requests, **kw):
        for r in requests:
            seen.setdefault(r.group_id, set()).add(r.targets)
        return "result"

    cfg = TrainConfig.build(targets="seen", rename_targets=0.5, tasks=("open_app",),
                            groups_per_iteration=64, group_size=2)
    producer = Producer(cfg, ["open_app"], [], None, store=None, run_id="r", judge=None, pool=lambda: None)
    from rl import produce
    real, produce.run_rollout = produce.run_rollout, rollout
    try:
        assert producer._online(random.Random(0), 1, 0) == "result"
    finally:
        produce.run_rollout = real
    assert all(len(t) == 1 for t in seen.values()), "a group's members share one episode"
    renamed = sum(t == {"renamed"} for t in seen.values())
    assert len(seen) == 64 and 20 <= renamed <= 44 and {"seen", "renamed"} >= set().union(*seen.values())


def test_the_warm_start_can_demonstrate_a_part_of_the_tasks():
    """--warm-start-tasks: the demonstrations cover those tasks only (the others are met in RL alone); a task
    the run does not train on is refused, naming it; none given: all of the run's tasks."""
    from rl.produce import warm_start_tasks

    tasks = ["open_app", "settings_turn_on", "files_open_folder"]
    assert warm_start_tasks(TrainConfig.build(tasks=tuple(tasks)), tasks) == tasks
    cfg = TrainConfig.build(tasks=tuple(tasks), warm_start_tasks=("files_open_folder", "open_app", "open_app"))
    assert warm_start_tasks(cfg, tasks) == ["files_open_folder", "open_app"]
    cfg = TrainConfig.build(tasks=tuple(tasks), warm_start_tasks=("open_app", "go_home"))
    with pytest.raises(KeyError, match=r"\['go_home'\] are not among the run's tasks"):
        warm_start_tasks(cfg, tasks)
