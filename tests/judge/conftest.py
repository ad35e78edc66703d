"""Fixtures of the judge tests: one real judge server on 127.0.0.1 for the session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def judge_server(tiny_model_dir):
    """tests/judge/judge_server.py: the tiny model behind an OpenAI-compatible server, judge behaviours."""
    from guiagent.policy.hf import load_transformers
    from tests.judge.judge_server import start_judge_server

    srv, _ = start_judge_server(load_transformers(tiny_model_dir, device="cpu"))
    yield srv
    srv.shutdown()
    srv.server_close()
