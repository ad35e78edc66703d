"""One emulator per slot: the androidworld suite leases each device's emulator (from a farm or a list
of console ports / serials), two slots never share one, a dead worker's lease comes back, and a slot
whose emulator fails marks it unhealthy and moves to a spare.

The pool and the suite's leasing run for real; only the device is a fake: android_world's AsyncEnv
shape over android_env's FakeSimulator (the same stand-in as test_suite.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from emulators.android import farm
from emulators.android.farm import FarmError
from emulators.android.suite import AndroidWorldDevice, AndroidWorldSuite, parse_console_ports, wrap_task
from emulators.base import GuiEnv
from emulators.pool import InProcessPool, ResetRequest

from .conftest import ROOT
from .test_suite import AsyncEnvOverFakeSimulator, ContactsAddContact

HUNG: set[int] = set()  # console ports whose (fake) emulator hangs on reset


class HangableEnv(AsyncEnvOverFakeSimulator):
    def __init__(self, console_port: int):
        super().__init__()
        self.console_port = console_port

    def reset(self, go_home=False):
        if self.console_port in HUNG:
            raise TimeoutError(f"emulator-{self.console_port} did not answer within 10 s")
        super().reset(go_home)


class FakeDeviceSuite(AndroidWorldSuite):
    """The androidworld suite with its leasing as is, attaching to fake devices instead of android_world's env."""

    def _load(self):
        return {"ContactsAddContact": wrap_task("ContactsAddContact", ContactsAddContact)}

    def _attach(self, console_port, grpc_port, adb_path, emulator_setup, freeze_datetime, serial, snapshot, restart,
                endpoint, lease, device_options):
        device = AndroidWorldDevice(HangableEnv(endpoint.console_port if endpoint else console_port), serial=None,
                                    snapshot=None, with_tree=False, settle_s=0, **device_options)
        device.lease = lease
        return device


SUITE = FakeDeviceSuite()


@pytest.fixture(autouse=True)
def _needs_android_env():
    pytest.importorskip("android_env")
    HUNG.clear()


def leased_ports(pool):
    return sorted(s.device.lease.endpoint.console_port for s in pool._worker._slots.values() if s.device)


def test_parse_console_ports_and_serials():
    assert parse_console_ports("5554, 5556") == [5554, 5556]
    assert parse_console_ports(serials="emulator-5554,emulator-5560") == [5554, 5560]
    with pytest.raises(ValueError, match="not a local emulator serial"):
        parse_console_ports(serials="10.0.0.7:5555")
    with pytest.raises(ValueError, match="two slots would share"):
        farm.local_endpoints([5554, 5554])


def test_two_slots_never_share_an_emulator(tmp_path):
    opts = {"console_ports": "5554,5556", "lease_dir": str(tmp_path)}
    with InProcessPool(f"{__name__}:SUITE", num_slots=2, device_options=opts) as pool:
        outs = pool.reset([ResetRequest(s, "ContactsAddContact", seed=s) for s in range(2)])
        assert [o.worker_error for o in outs] == [None, None]
        assert leased_ports(pool) == [5554, 5556]
        with pytest.raises(FarmError, match="2 of 2 leased"):  # a third device finds none free
            SUITE.make_device(**opts)
    assert all(farm.try_lease(e, tmp_path) for e in farm.local_endpoints([5554, 5556]))  # closed: returned


def test_a_failing_emulator_is_marked_and_the_slot_moves_to_a_spare(tmp_path):
    opts = {"console_ports": "5554,5556,5558", "lease_dir": str(tmp_path)}
    with InProcessPool(f"{__name__}:SUITE", num_slots=2, device_options=opts) as pool:
        pool.reset([ResetRequest(s, "ContactsAddContact", seed=s) for s in range(2)])
        assert leased_ports(pool) == [5554, 5556]
        HUNG.add(5554)  # slot 0's emulator hangs
        out = pool.reset([ResetRequest(0, "ContactsAddContact", seed=7)])[0]
        assert out.worker_error is None  # the retry ran on a fresh device: the spare
        assert leased_ports(pool) == [5556, 5558]
    marker = farm.unhealthy_marker(tmp_path, farm.local_endpoints([5554])[0])
    assert "reset failed: TimeoutError: emulator-5554 did not answer" in marker.read_text()


def test_a_killed_worker_returns_its_lease(tmp_path):
    code = ("import sys, os; sys.path.insert(0, sys.argv[2]); from emulators.android import farm; "
            "l = farm.lease_from(farm.local_endpoints([5554, 5556]), sys.argv[1]); print(l.endpoint.name, flush=True); "
            "os.kill(os.getpid(), 9)")  # dies holding it, as a killed Ray actor does
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(ROOT)], capture_output=True, text=True,
                       check=False, timeout=60)
    assert r.returncode == -9 and r.stdout.split() == ["emulator-5554"]
    assert farm.lease_from(farm.local_endpoints([5554, 5556]), tmp_path).endpoint.name == "emulator-5554"


class ClipboardTask(ContactsAddContact):
    """Shaped like android_world's SystemCopyToClipboard: it names no app for android_world to restore."""

    app_names = ()


class ContactsTask(ContactsAddContact):
    app_names = ("contacts",)


def test_snapshot_need_comes_from_what_the_task_declares():
    from emulators.android.suite import parse_snapshot_reset, snapshot_need

    assert snapshot_need(ContactsTask) == (False, "android_world restores its apps (contacts) itself")
    assert snapshot_need(ClipboardTask)[0] is True
    assert snapshot_need(ContactsAddContact) == (True, "the task declares no apps")  # not declared at all

    class Declared(ContactsTask):
        snapshot_reset = True

    assert snapshot_need(Declared) == (True, "the task declares it")
    assert wrap_task("C", ContactsTask).needs_snapshot is False and wrap_task("X", ClipboardTask).needs_snapshot
    assert [parse_snapshot_reset(v, farm=f) for v, f in ((None, True), (None, False), ("true", False),
                                                         ("no", True), ("AUTO", False))] == [
        "auto", "never", "always", "never", "auto"]
    with pytest.raises(ValueError, match="snapshot_reset: 'sometimes' is not one of auto, always, never"):
        parse_snapshot_reset("sometimes", farm=True)


def test_snapshot_reset_defaults_to_auto_on_a_farm(tmp_path):
    path = farm.write_endpoints(farm.FarmSpec(emulators=1), tmp_path / "farm" / "endpoints.json")
    device = SUITE.make_device(farm=str(path))
    assert device.snapshot_reset == "auto"
    device.close()
    device = SUITE.make_device(console_ports="5554", lease_dir=str(tmp_path))
    assert device.snapshot_reset == "never"
    device.close()
    with pytest.raises(ValueError, match="snapshot_reset"):  # refused before any emulator is leased
        SUITE.make_device(farm=str(path), snapshot_reset="sometimes")
    farm.lease_endpoint(path).release()


def test_snapshot_reset_through_the_real_adb_client(tmp_path, monkeypatch):
    """Between episodes the device reloads its snapshot with ``adb emu avd snapshot load`` (the real
    client, a private adb server, a fake emulator's adbd and console): always, or (auto) only before
    a task that needs it; a snapshot that does not load is a device error that marks the emulator
    unhealthy when the slot lets it go."""
    import shutil

    from emulators.base import DeviceError

    from .conftest import free_port
    from .fake_adbd import FakeAdbd, FakeConsole, free_emulator_adb_port, start_adb_and_wait

    adb = shutil.which("adb")
    port = free_emulator_adb_port()
    if adb is None or port is None:
        pytest.skip("needs the adb client and a free emulator port in 5555..5585")
    adbd, console = FakeAdbd(port), FakeConsole(port - 1)
    # explicit: android_env's AdbController deletes ANDROID_ADB_SERVER_PORT from os.environ
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(free_port())}
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", env["ANDROID_ADB_SERVER_PORT"])
    try:
        if not start_adb_and_wait(adb, env, adbd.serial):
            pytest.skip(f"the adb server did not list the fake {adbd.serial}")
        endpoints = farm.local_endpoints([port - 1])
        device = AndroidWorldDevice(HangableEnv(port - 1), serial=adbd.serial, snapshot="guiagent_ready",
                                    with_tree=False, settle_s=0)
        device.lease, device.snapshot_reset = farm.lease_from(endpoints, tmp_path), "always"
        device.reset()
        assert console.commands[-1] == "avd snapshot load guiagent_ready" and device.aw_env.resets == 1
        # auto: decided per task, from what the task declares
        device.snapshot_reset = "auto"
        loads = device.snapshot_loads
        GuiEnv(device, wrap_task("ContactsAddContact", ContactsTask)).reset(seed=1)
        assert device.snapshot_loads == loads and device.aw_env.resets == 2  # android_world restores contacts
        GuiEnv(device, wrap_task("SystemCopyToClipboard", ClipboardTask)).reset(seed=1)
        assert device.snapshot_loads == loads + 1 and console.commands[-1] == "avd snapshot load guiagent_ready"
        device.snapshot_reset = "always"
        device.boot_snapshot = "gone"
        with pytest.raises(DeviceError, match=f"snapshot 'gone' did not load on {adbd.serial}: KO: snapshot gone"):
            device.reset()
        device.close()
        assert "snapshot 'gone' did not load" in farm.unhealthy_marker(tmp_path, endpoints[0]).read_text()
        assert farm.try_lease(endpoints[0], tmp_path) is not None  # released, though marked
    finally:
        adbd.close(), console.close()
        subprocess.run([adb, "kill-server"], env=env, capture_output=True, check=False, timeout=30)
