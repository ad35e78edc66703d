"""The contract between guiagent's ``androidworld`` suite and an installed android_world, on CPU.

Run by ``scripts/contracts.sh`` in a virtual environment that holds android_world (from its
public source, with its own pins) and guiagent; no emulator is needed. Each check prints ``ok``
or ``BROKEN``; the exit status is 1 when one broke.

    .contracts/android_world/bin/python scripts/contracts_android_world.py

* the task registry loads (``TaskRegistry().get_registry('android_world')``);
* ``guiagent tasks list --env androidworld --json`` lists exactly the registry's task names;
* every task class, through the suite's wrapper: step budget from ``complexity``, parameters
  from ``generate_random_params()`` under a seed (twice, equal; JSON, as the trajectory store
  needs; the global RNG left alone), the task instantiated from them (values that are not JSON
  drawn again from the seed, equal each time) and its goal rendered, ``app_names`` read for the snapshot policy;
  ``initialize_task`` / ``is_successful`` / ``tear_down`` take the env as the suite passes it;
* what the device side calls: ``env_launcher.load_and_setup_env`` takes the suite's keyword
  arguments; the env has ``controller``, ``reset(go_home=...)``, ``close()`` and an
  ``interaction_cache``; the controller is an android_env wrapper with the methods the transport
  uses; android_env's ``_get_accessibility_forwarder_apk`` (replaced by a local file) exists.
"""

from __future__ import annotations

import inspect
import json
import random
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

PROBLEMS: list[str] = []


def check(name: str, fn: Callable[[], Any]) -> Any:
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - report it, run the other checks
        PROBLEMS.append(f"{name}: {type(e).__name__}: {e}")
        print(f"BROKEN  {name}: {type(e).__name__}: {str(e)[:400]}")
        if "-v" in sys.argv:
            traceback.print_exc()
        return None
    print(f"ok      {name}" + (f" ({out})" if isinstance(out, str) and out else ""))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal values, images by their pixels."""
    if hasattr(a, "tobytes") and hasattr(a, "size"):
        return type(a) is type(b) and a.size == b.size and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def main() -> int:
    import importlib.metadata as md

    versions = {d: md.version(d) for d in ("android_world", "android-env", "numpy", "protobuf", "guiagent")}
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    from android_world import registry as aw_registry

    reg = check("TaskRegistry().get_registry('android_world') loads",
                lambda: aw_registry.TaskRegistry().get_registry("android_world"))
    if not reg:
        return 1
    print(f"        {len(reg)} tasks in the registry")

    def listed() -> str:
        guiagent = Path(sys.executable).with_name("guiagent")
        proc = subprocess.run([str(guiagent), "tasks", "list", "--env", "androidworld", "--json"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr.strip()[-400:]
        ids = json.loads(proc.stdout.strip().splitlines()[-1])
        assert sorted(ids) == sorted(reg), f"listed {len(ids)}, registry {len(reg)}: " \
            f"{sorted(set(reg) ^ set(ids))[:5]}"
        return f"{len(ids)} tasks listed"

    check("guiagent tasks list --env androidworld lists every task class", listed)

    from emulators.android.suite import REGENERATED, AndroidWorldSuite, snapshot_need, step_budget
    from emulators.base import Task

    suite = AndroidWorldSuite()

    def every_task() -> str:
        bad: list[str] = []
        budgets: dict[int, int] = {}
        regenerated = 0
        for name, aw_cls in sorted(reg.items()):
            try:
                cls = suite.task_class(name)
                assert issubclass(cls, Task) and cls.eval_class is aw_cls
                cx = aw_cls.complexity
                assert isinstance(cx, (int, float)), f"complexity {cx!r} is not a number on the class"
                assert cls.max_steps == step_budget(cx)
                budgets[cls.max_steps] = budgets.get(cls.max_steps, 0) + 1
                assert isinstance(aw_cls.app_names, (tuple, list)), f"app_names {aw_cls.app_names!r}"
                snapshot_need(aw_cls)
                state = random.getstate()
                p1 = cls.sample_params(random.Random(7))
                p2 = cls.sample_params(random.Random(7))
                assert random.getstate() == state, "the global RNG moved"
                assert p1 == p2, "params differ under one seed"
                json.dumps(p1)  # what the trajectory store records
                task, again = cls(p1), cls(json.loads(json.dumps(p1)))
                assert _same(task.aw_task.params, again.aw_task.params), "regenerated params differ"
                regenerated += bool(p1.get(REGENERATED))
                goal = task.goal
                assert isinstance(goal, str) and goal.strip() and goal == again.goal, f"goal {goal!r}"
                for meth in ("initialize_task", "is_successful", "tear_down"):
                    inspect.signature(getattr(task.aw_task, meth)).bind(object())
            except Exception as e:  # noqa: BLE001 - collect every task that breaks
                bad.append(f"{name}: {type(e).__name__}: {str(e)[:120]}")
        assert not bad, f"{len(bad)} of {len(reg)} tasks: " + "; ".join(bad[:4])
        return (f"{len(reg)} tasks, {regenerated} with values drawn again from the seed; "
                f"step budgets {dict(sorted(budgets.items()))}")

    check("every task: wrapped, parameters generated (seeded, JSON), goal rendered", every_task)

    def device_side() -> str:
        from android_env.wrappers import a11y_grpc_wrapper, base_wrapper
        from android_world.env import android_world_controller, env_launcher, interface

        inspect.signature(env_launcher.load_and_setup_env).bind(
            console_port=5554, emulator_setup=False, freeze_datetime=True, grpc_port=8554, adb_path="adb")
        env_cls = interface.AsyncAndroidEnv
        assert isinstance(inspect.getattr_static(env_cls, "controller"), property)
        inspect.signature(env_cls.reset).bind(object(), go_home=True)
        inspect.signature(env_cls.close).bind(object())
        assert "interaction_cache" in dir(env_cls)
        ctrl = android_world_controller.AndroidWorldController
        assert issubclass(ctrl, base_wrapper.BaseWrapper)
        for meth in ("step", "reset", "observation_spec", "action_spec", "execute_adb_call", "close"):
            assert callable(getattr(ctrl, meth, None)), f"AndroidWorldController.{meth}"
        assert callable(getattr(a11y_grpc_wrapper, "_get_accessibility_forwarder_apk", None))
        return "load_and_setup_env, AsyncAndroidEnv, AndroidWorldController, a11y forwarder"

    check("what the device side calls exists with the arguments it passes", device_side)
    print(f"{'BROKEN' if PROBLEMS else 'ok'}: android_world {versions['android_world']}, "
          f"{len(PROBLEMS)} broken contract(s)")
    return 1 if PROBLEMS else 0


if __name__ == "__main__":
    sys.exit(main())
