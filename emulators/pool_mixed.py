"""One fleet over several suites: a pool per suite behind one slot space.

``MixedPool({"webapps": pool_a, "miniwob": pool_b})`` takes requests for tasks named
``<suite>.<task>`` (:mod:`emulators.suites.mixed`) and sends each to its suite's pool, same slot
number, task id without the suite part. A slot belongs to the suite of its last reset; steps and
oracle calls follow it there. Each suite's pool has every slot (its devices start on the first reset
in that slot), so the rollout may put any task in any free slot.

:func:`open_pool` builds the pools of a run: in this process, or Ray actors per suite, where a Ray
custom resource named after a suite (``--worker-resources androidworld 1``) goes to that suite's
workers only, so AndroidWorld workers land on the KVM hosts that advertise it while browser
workers run anywhere; other resources go to every worker. Device options work the same way:
``androidworld.farm PATH`` goes to the androidworld suite only, ``headless false`` to every suite.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from emulators.pool import InProcessPool, RayEnvPool
from emulators.pool_types import ActionRequest, EnvOutput, PoolRequestError, ResetRequest, SnapshotOutput
from emulators.suites.mixed import split_env, split_task, suite_options  # noqa: F401 (suite_options: kept importable from here)
from guiagent.types import Action

__all__ = ["MixedPool", "open_pool", "suite_options", "suite_resources"]


class MixedPool:
    """Several suites' pools as one :class:`~emulators.pool_types.EnvPool` (see the module doc)."""

    def __init__(self, pools: Mapping[str, Any]):
        if not pools:
            raise ValueError("a mixed pool needs at least one suite's pool")
        self.pools = dict(pools)
        self.num_slots = min(p.num_slots for p in self.pools.values())
        self.suite = ",".join(self.pools)
        self._owner: dict[int, str] = {}

    def _route(self, slots: Sequence[int]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for s in slots:
            owner = self._owner.get(s)
            if owner is None:
                raise PoolRequestError(f"slot {s} has no running episode (never reset): reset it before stepping")
            out.setdefault(owner, []).append(s)
        return out

    def _by_suite(self, requests: Sequence[ResetRequest]) -> dict[str, list[tuple[int, ResetRequest]]]:
        """Resets grouped by suite (index in ``requests``, the request with the suite part cut), checked."""
        by_suite: dict[str, list[tuple[int, ResetRequest]]] = {}
        for i, r in enumerate(requests):
            try:
                suite, task = split_task(r.task_id)
            except ValueError as e:
                raise PoolRequestError(str(e)) from None
            if suite not in self.pools:
                raise PoolRequestError(f"task {r.task_id!r}: no pool for suite {suite!r} (this pool runs {self.suite})")
            if not 0 <= r.slot < self.num_slots:
                raise PoolRequestError(f"slot {r.slot!r} is out of range: this pool has slots 0..{self.num_slots - 1}")
            by_suite.setdefault(suite, []).append((i, dataclasses.replace(r, task_id=task)))
        return by_suite

    def reset(self, requests: Sequence[ResetRequest]) -> list[EnvOutput]:
        out: list[EnvOutput | None] = [None] * len(requests)
        for suite, items in self._by_suite(requests).items():
            for (i, r), o in zip(items, self.pools[suite].reset([r for _, r in items]), strict=True):
                out[i] = o
                self._owner[r.slot] = suite
        return out  # type: ignore[return-value]

    def step_and_reset(self, steps: Sequence[ActionRequest], resets: Sequence[ResetRequest]
                       ) -> tuple[list[EnvOutput], list[EnvOutput]]:
        """Steps and resets in one batch of each suite's pool (the suites one after another, as
        :meth:`step` goes); outputs in request order. Checked before any pool sees it."""
        slots = [r.slot for r in (*steps, *resets)]
        twice = sorted({s for s in slots if slots.count(s) > 1})
        if twice:
            raise PoolRequestError(f"slot {twice[0]} appears twice in one batch")
        stepping = self._route([r.slot for r in steps])
        resetting = self._by_suite(resets)
        index = {r.slot: i for i, r in enumerate(steps)}
        step_out: list[EnvOutput | None] = [None] * len(steps)
        reset_out: list[EnvOutput | None] = [None] * len(resets)
        for suite in dict.fromkeys([*stepping, *resetting]):
            pool, sreqs = self.pools[suite], [steps[index[s]] for s in stepping.get(suite, [])]
            items = resetting.get(suite, [])
            both = getattr(pool, "step_and_reset", None)
            if callable(both):
                souts, routs = both(sreqs, [r for _, r in items])
            else:
                souts = pool.step(sreqs) if sreqs else []
                routs = pool.reset([r for _, r in items]) if items else []
            for r, o in zip(sreqs, souts, strict=True):
                step_out[index[r.slot]] = o
            for (i, r), o in zip(items, routs, strict=True):
                reset_out[i] = o
                self._owner[r.slot] = suite
        return step_out, reset_out  # type: ignore[return-value]

    def step(self, requests: Sequence[ActionRequest]) -> list[EnvOutput]:
        index = {r.slot: i for i, r in enumerate(requests)}
        out: list[EnvOutput | None] = [None] * len(requests)
        for suite, slots in self._route([r.slot for r in requests]).items():
            reqs = [requests[index[s]] for s in slots]
            for r, o in zip(reqs, self.pools[suite].step(reqs), strict=True):
                out[index[r.slot]] = o
        return out  # type: ignore[return-value]

    def oracle_actions(self, slots: Sequence[int]) -> list[Action | None]:
        slots = list(slots)
        out: dict[int, Action | None] = {}
        for suite, ss in self._route(slots).items():
            out.update(zip(ss, self.pools[suite].oracle_actions(ss), strict=True))
        return [out[s] for s in slots]

    def snapshot(self, slots: Sequence[int]) -> list[SnapshotOutput]:
        slots = list(slots)
        out: dict[int, SnapshotOutput] = {}
        for suite, ss in self._route(slots).items():
            out.update(zip(ss, self.pools[suite].snapshot(ss), strict=True))
        return [out[s] for s in slots]

    def health(self) -> list[bool]:
        return [ok for p in self.pools.values() for ok in p.health()]

    def close(self) -> None:
        # the last pool first: the first Ray pool may own the Ray runtime the others joined
        for p in reversed(list(self.pools.values())):
            p.close()

    def __enter__(self) -> MixedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def suite_resources(suite: str, suites: Sequence[str], resources: Mapping[str, float]) -> dict[str, float]:
    """The Ray resources ``suite``'s workers ask for: a resource named after one of ``suites`` only
    for that suite's workers, any other resource for every worker."""
    return {k: v for k, v in resources.items() if k not in suites or k == suite}


def open_pool(env: str, *, kind: str = "inprocess", slots: int = 1, workers: int = 1,
              device_options: Mapping[str, str] | None = None, worker_resources: Mapping[str, float] | None = None,
              ray_address: str | None = None) -> Any:
    """The env pool of a run over ``env`` (one suite, or several: ``webapps,miniwob``)."""
    names = split_env(env)
    device_options, worker_resources = dict(device_options or {}), dict(worker_resources or {})

    def one(suite: str) -> Any:
        if kind == "ray":
            per = max(1, math.ceil(slots / workers))
            return RayEnvPool(suite, num_workers=workers, envs_per_worker=per, address=ray_address,
                              device_options=suite_options(suite, names, device_options),
                              worker_resources=suite_resources(suite, names, worker_resources))
        return InProcessPool(suite, num_slots=slots, device_options=suite_options(suite, names, device_options))

    if len(names) == 1:
        return one(names[0])
    pools: dict[str, Any] = {}
    try:
        for name in names:
            pools[name] = one(name)
    except BaseException:
        for p in reversed(list(pools.values())):
            p.close()
        raise
    return MixedPool(pools)
