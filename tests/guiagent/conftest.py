"""Fixtures shared by the command tests that run ``guiagent eval`` against a model server."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(scope="module")
def uis1_run(tmp_path_factory):
    """An imported UI-S1 folder (two recorded episodes of two steps)."""
    from guiagent.datasets import import_dataset
    from tests.guiagent.test_datasets_uis1 import _eval_file

    d = tmp_path_factory.mktemp("uis1")
    import_dataset("uis1", _eval_file(d), d / "run", images_dir=str(d / "images"))
    return str(d / "run")


@pytest.fixture
def project_loggers():
    """The project's loggers as they were after the command (show_progress sets them up)."""
    from guiagent.logs import PACKAGES

    loggers = [logging.getLogger(n) for n in PACKAGES]
    saved = [(lg.level, list(lg.handlers), lg.propagate) for lg in loggers]
    yield
    for lg, (level, handlers, propagate) in zip(loggers, saved):
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate = propagate
