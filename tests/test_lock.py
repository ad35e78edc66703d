"""The CPU lock agrees with pyproject.toml: every dependency (and every `[dev]` one) is pinned there,
at a version its range allows, with a hash; the two lock files pin shared packages alike.

`bash scripts/lock.sh --check` is the full check (it resolves again, with network); this one needs none.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def _lock(name: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a lock file."""
    pins: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in (ROOT / "constraints" / name).read_text(encoding="utf-8").splitlines():
        m = _PIN.match(line)
        if m:
            current = canonicalize_name(m.group(1))
            assert current not in pins, f"{name}: {current} pinned twice"
            pins[current] = (m.group(2), [])
        for h in re.findall(r"--hash=sha256:([0-9a-f]{64})", line):
            assert current is not None
            pins[current][1].append(h)
    return pins


def _requirements(extra: str | None) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    if extra:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    reqs += [Requirement(line) for line in (ROOT / "constraints" / "build.in").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    return reqs


@pytest.mark.parametrize("lock,extra", [("cpu.lock", None), ("cpu-dev.lock", "dev")])
def test_every_dependency_is_locked_within_its_range_with_hashes(lock, extra):
    pins = _lock(lock)
    assert pins, lock
    for req in _requirements(extra):
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.11", "sys_platform": "linux"}):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in constraints/{lock}: run bash scripts/lock.sh"
        version = pins[name][0]
        assert req.specifier.contains(version, prereleases=True), \
            f"constraints/{lock} pins {name}=={version}, outside pyproject.toml's {req}: run bash scripts/lock.sh"
    for name, (version, hashes) in pins.items():
        assert hashes, f"constraints/{lock}: {name}=={version} has no hash"
    assert pins["torch"][0] == "2.13.0+cpu"  # the CPU build; an unpinned torch is a CUDA build of GBs
    assert "torchvision" not in pins


def test_dev_lock_pins_the_shared_packages_alike():
    run, dev = _lock("cpu.lock"), _lock("cpu-dev.lock")
    assert set(run) <= set(dev)
    assert {n: v for n, (v, _) in run.items()} == {n: dev[n][0] for n in run}


def test_setup_installs_from_the_lock():
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert "--require-hashes --no-deps -r \"$lock\"" in setup
    assert "lock=constraints/cpu-dev.lock" in setup
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash scripts/setup.sh --dev && python3 -m pytest -q" in ci
