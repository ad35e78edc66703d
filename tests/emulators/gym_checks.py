"""Gymnasium's own env checker on a registered env, held to no warning at all."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium
from gymnasium.utils.env_checker import check_env as gym_check_env

import emulators  # noqa: F401  (registers the envs)


@contextlib.contextmanager
def checked_env(env_id: str) -> Iterator[Any]:
    """``gymnasium.make(env_id)`` (rgb_array rendering) after Gymnasium's ``check_env`` passed on it
    without a warning (render_fps declared too); closed after the block."""
    env = gymnasium.make(env_id, render_mode="rgb_array")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gym_check_env(env.unwrapped)
        problems = [str(w.message) for w in caught]
        assert not problems, problems
        yield env
    finally:
        env.close()
