"""Android snapshots: emulator snapshots through the real protocol clients, against fake emulators.

* gRPC: an in-process server implements the emulator's ``EmulatorController`` and ``SnapshotService``
  (android-env's compiled stubs, the real gRPC channel and client) over a tiny device state: taps
  count up and the screen shows the count; ``SaveSnapshot`` / ``LoadSnapshot`` / ``DeleteSnapshot``
  keep and bring back that state by name.
* android_env: its own ``Environment.save_state`` / ``load_state`` (which stop and restart its task
  manager around the simulator's) over a ``FakeSimulator`` subclass that keeps states by name, and
  the plain ``FakeSimulator``, which has none.
* adb: the real ``adb emu avd snapshot save|load|delete`` client through a private adb server to a
  fake emulator's adbd and console.

A toy task on top (its success and milestones read from the screen) checks the env-level contract:
a restored env shows the same screen bytes, milestones and counters, goes on from there, and a
state restores only on the emulator that holds it.
"""

from __future__ import annotations

import io
import os
import random
import subprocess
from concurrent import futures

import numpy as np
import pytest
from PIL import Image

grpc = pytest.importorskip("grpc")
pytest.importorskip("android_env")

from google.protobuf import empty_pb2  # noqa: E402

from android_env.components.simulators.fake import fake_simulator  # noqa: E402
from android_env.proto import snapshot_service_pb2 as spb  # noqa: E402
from android_env.proto import snapshot_service_pb2_grpc as spb_grpc  # noqa: E402
from android_env.proto import state_pb2  # noqa: E402

from emulators.android import android_env as ae  # noqa: E402
from emulators.android.adb import AdbTarget, AdbTransport  # noqa: E402
from emulators.android.device import AndroidDevice  # noqa: E402
from emulators.android.grpc import EmulatorGrpcTransport, load_protos  # noqa: E402
from emulators.base import GuiEnv, SnapshotError, Task  # noqa: E402
from guiagent.types import Click  # noqa: E402

from .android.conftest import free_port  # noqa: E402
from .android.fake_adbd import FakeAdbd, FakeConsole, free_emulator_adb_port, start_adb_and_wait  # noqa: E402

pb, pb_grpc = load_protos()
W, H = 120, 200


def _png(count: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (W, H), (min(255, 40 * count), 90, 200)).save(buf, format="PNG")
    return buf.getvalue()


def _count(png: bytes) -> int:
    return Image.open(io.BytesIO(png)).getpixel((0, 0))[0] // 40


class FakeEmulator(pb_grpc.EmulatorControllerServicer, spb_grpc.SnapshotServiceServicer):
    """Taps count up; the screen shows the count; snapshots keep the count by name."""

    def __init__(self, hardware: str = "pixel_6-x86_64-api34"):
        self.count = 0
        self.snapshots: dict[str, int] = {}
        self.deleted: list[str] = []
        self.refuse_saves = False
        self.hardware = hardware
        self.imported: set[str] = set()
        self.loaded_import = False
        self.pulls: list[str] = []
        self.pushed_messages = 0
        self.break_pulls = False

    def getScreenshot(self, request, context):  # noqa: N802 (proto naming)
        return pb.Image(format=pb.ImageFormat(format=request.format, width=W, height=H), image=_png(self.count))

    def sendTouch(self, request, context):  # noqa: N802
        if any(t.pressure == 0 for t in request.touches):
            self.count += 1
        return empty_pb2.Empty()

    def SaveSnapshot(self, request, context):  # noqa: N802
        if self.refuse_saves:
            return spb.SnapshotPackage(snapshot_id=request.snapshot_id, success=False, err=b"disk full")
        if self.loaded_import:  # the emulator's documented rule for imported snapshots
            return spb.SnapshotPackage(snapshot_id=request.snapshot_id, success=False,
                                       err=b"cannot save after loading an imported snapshot")
        self.snapshots[request.snapshot_id] = self.count
        return spb.SnapshotPackage(snapshot_id=request.snapshot_id, success=True)

    def LoadSnapshot(self, request, context):  # noqa: N802
        if request.snapshot_id not in self.snapshots:
            return spb.SnapshotPackage(snapshot_id=request.snapshot_id, success=False, err=b"no such snapshot")
        self.count = self.snapshots[request.snapshot_id]
        self.loaded_import |= request.snapshot_id in self.imported
        return spb.SnapshotPackage(snapshot_id=request.snapshot_id, success=True)

    # an exported snapshot: a TAR-like blob naming the hardware and the state, padded past one message
    def PullSnapshot(self, request, context):  # noqa: N802
        self.pulls.append(request.snapshot_id)
        if request.snapshot_id not in self.snapshots:
            yield spb.SnapshotPackage(snapshot_id=request.snapshot_id, success=False, err=b"no such snapshot")
            return
        blob = f"{self.hardware}|{self.snapshots[request.snapshot_id]}|".encode() + bytes(3 * 1024 * 1024)
        for i in range(0, len(blob), 1_500_000):
            yield spb.SnapshotPackage(snapshot_id=request.snapshot_id, payload=blob[i:i + 1_500_000], success=True)
            if self.break_pulls:
                context.abort(grpc.StatusCode.INTERNAL, "disk read error")

    def PushSnapshot(self, request_iterator, context):  # noqa: N802
        first = next(request_iterator)
        self.pushed_messages += 1
        blob = b"".join(m.payload for m in request_iterator)  # a cancelled stream raises here
        hardware, count, padding = blob.split(b"|", 2)
        if hardware.decode() != self.hardware or len(padding) != 3 * 1024 * 1024:
            return spb.SnapshotPackage(snapshot_id=first.snapshot_id, success=False,
                                       err=b"incompatible snapshot: different hardware configuration")
        self.snapshots[first.snapshot_id] = int(count)
        self.imported.add(first.snapshot_id)
        return spb.SnapshotPackage(snapshot_id=first.snapshot_id, success=True)

    def DeleteSnapshot(self, request, context):  # noqa: N802
        self.deleted.append(request.snapshot_id)
        self.snapshots.pop(request.snapshot_id, None)
        return spb.SnapshotPackage(snapshot_id=request.snapshot_id, success=True)


@pytest.fixture()
def emulators():
    out = []
    for hardware in ("pixel_6-x86_64-api34", "pixel_6-x86_64-api34", "tablet-arm64-api30"):
        servicer = FakeEmulator(hardware)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_EmulatorControllerServicer_to_server(servicer, server)
        spb_grpc.add_SnapshotServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        out.append((servicer, f"127.0.0.1:{port}", server))
    yield out
    for _, _, server in out:
        server.stop(0)


def _device(address: str, **kw) -> AndroidDevice:
    return AndroidDevice(EmulatorGrpcTransport(address), settle_s=0, home_on_reset=False, with_tree=False, **kw)


class TapThrice(Task):
    """Tap three times (the state is the device's: the count on its screen)."""

    suite = "test"
    task_id = "tap_thrice"
    template = "Tap {n} times"
    max_steps = 6

    @classmethod
    def sample_params(cls, rng: random.Random):
        return {"n": 3, "salt": rng.randrange(100)}

    def setup(self, device):
        self.start = _count(device.observe().screenshot)
        return self.goal

    def evaluate(self, device, answer=None):
        return float(_count(device.observe().screenshot) - self.start >= self.params["n"])

    def milestones(self, device):
        done = _count(device.observe().screenshot) - self.start
        return [done >= i for i in range(1, self.params["n"] + 1)]

    def oracle(self, device):
        return Click(0.5, 0.5)


def test_grpc_snapshot_restores_screen_task_and_counters(emulators):
    (emu, address, _), (other, other_address, _), _ = emulators
    env = GuiEnv(_device(address), TapThrice)
    assert env.can_snapshot
    env.reset_typed(seed=1)
    env.step_typed(Click(0.5, 0.5))
    state = env.snapshot()
    assert state.device.kind == "android-snapshot" and emu.snapshots[state.device.data["name"]] == 1
    obs, *_ = env.step_typed(Click(0.5, 0.5))
    obs, term, trunc, info = env.step_typed(Click(0.5, 0.5))
    assert info.success is None and info.milestones == (True, True, True) and emu.count == 3
    restored = env.restore(state)
    assert restored.screenshot == state.observation.screenshot and emu.count == 1
    assert env.steps == 1 and env.task.milestones(env.device) == list(state.milestones) == [True, False, False]
    assert env.task.start == 0  # the task's own attributes came back with it
    # the episode goes on from the restored step, to the same end as the original
    env.step_typed(Click(0.5, 0.5))
    _, _, _, info = env.step_typed(Click(0.5, 0.5))
    assert info.milestones == (True, True, True) and env.task.evaluate(env.device) == 1.0
    # another emulator does not hold the snapshot: refused, and that env is not touched
    other_env = GuiEnv(_device(other_address), TapThrice)
    with pytest.raises(SnapshotError, match="restore on the emulator that saved them"):
        other_env.restore(state)
    assert other.count == 0
    env.close(), other_env.close()
    assert state.device.data["name"] in emu.deleted  # the device deletes its snapshots on close


def test_grpc_snapshots_are_bounded_and_failures_are_snapshot_errors(emulators):
    (emu, address, _), _, _ = emulators
    env = GuiEnv(_device(address, max_snapshots=2), TapThrice)
    env.reset_typed(seed=1)
    states = []
    for _ in range(3):
        env.step_typed(Click(0.5, 0.5))
        states.append(env.snapshot())
    assert len(emu.snapshots) == 2 and states[0].device.data["name"] in emu.deleted
    with pytest.raises(SnapshotError, match="deleted"):
        env.restore(states[0])
    assert env.restore(states[1]).screenshot == _png(2)
    emu.refuse_saves = True
    with pytest.raises(SnapshotError, match="disk full"):
        env.snapshot()
    env.step_typed(Click(0.5, 0.5))  # a failed snapshot leaves the episode going
    emu.snapshots.clear()  # the emulator lost it (wiped, rebooted without it)
    with pytest.raises(SnapshotError, match="did not load"):
        env.restore(states[2])
    env.close()


def test_grpc_snapshot_copied_in_from_a_peer_emulator_restores_there(emulators, caplog):
    """A state restores on another emulator of the farm: its snapshot is pulled from the emulator
    that saved it and pushed into this one (streamed, in chunks), then loaded."""
    (emu, address, _), (other, other_address, _), (tablet, tablet_address, _) = emulators
    env = GuiEnv(_device(address), TapThrice)
    env.reset_typed(seed=1)
    env.step_typed(Click(0.5, 0.5))
    state = env.snapshot()
    env.step_typed(Click(0.5, 0.5))
    name = state.device.data["name"]
    branch = GuiEnv(_device(other_address, snapshot_peers=[address]), TapThrice)
    assert branch.can_snapshot
    obs = branch.restore(state)
    assert obs.screenshot == state.observation.screenshot and other.count == 1 and emu.count == 2
    assert branch.steps == 1 and branch.task.milestones(branch.device) == [True, False, False]
    assert emu.pulls == [name] and name in other.imported
    # the branch goes on to the end on its own emulator; the original is untouched
    branch.step_typed(Click(0.5, 0.5))
    _, _, _, info = branch.step_typed(Click(0.5, 0.5))
    assert info.milestones == (True, True, True) and other.count == 3 and emu.count == 2
    # a second restore of the same state loads the copy already there
    assert branch.restore(state).screenshot == state.observation.screenshot and emu.pulls == [name]
    # the emulator's rule: no saving after loading an imported snapshot; the device says so
    assert "cannot save snapshots after that" in branch.device.saves_blocked
    with pytest.raises(SnapshotError, match="cannot save snapshots after that"):
        branch.snapshot()
    branch.step_typed(Click(0.5, 0.5))  # the episode goes on
    branch.close()
    assert name in other.deleted  # the copy is the device's to delete, like its own
    # not a peer: refused before anything is pulled or pushed
    stranger = GuiEnv(_device(other_address), TapThrice)
    with pytest.raises(SnapshotError, match="snapshot_peers: none"):
        stranger.restore(state)
    assert emu.pulls == [name]
    stranger.close()
    # another hardware configuration: the emulator refuses the import, one clear error
    pushes = tablet.pushed_messages
    wrong = GuiEnv(_device(tablet_address, snapshot_peers=[address]), TapThrice)
    with pytest.raises(SnapshotError, match="not imported .*different hardware"):
        wrong.restore(state)
    assert tablet.pushed_messages == pushes + 1 and tablet.count == 0 and wrong.device.saves_blocked is None
    wrong.close()
    # the source breaks mid-stream: the push is cancelled, nothing half-imported, one clear error
    emu.break_pulls = True
    torn = GuiEnv(_device(other_address, snapshot_peers=[address]), TapThrice)
    before, count = dict(other.snapshots), other.count
    with pytest.raises(SnapshotError, match="disk read error"):
        torn.restore(state)
    assert other.snapshots == before and other.count == count
    assert not [r for r in caplog.records if r.name.startswith("grpc") and r.levelname == "ERROR"]
    torn.close()
    emu.break_pulls = False
    env.close()
    # the source deleted it (closed): the pull fails, one clear error
    late = GuiEnv(_device(tablet_address, snapshot_peers=[address]), TapThrice)
    with pytest.raises(SnapshotError, match="not exported .*no such snapshot"):
        late.restore(state)
    late.close()


def test_snapshot_peers_from_the_command_line():
    dev = AndroidDevice.__new__(AndroidDevice)
    AndroidDevice.__init__(dev, ae.AndroidEnvTransport.fake((W, H)), snapshot_peers="127.0.0.1:8554, grpc://h:8555")
    assert dev.snapshot_peers == {"127.0.0.1:8554", "h:8555"}
    dev.close()


class StatefulSimulator(fake_simulator.FakeSimulator):
    """android_env's FakeSimulator with states: the frame is the state, kept by snapshot name."""

    def __init__(self, config):
        super().__init__(config)
        h, w = config.screen_dimensions
        self.frame = np.zeros((h, w, 3), np.uint8)
        self.states: dict[str, np.ndarray] = {}
        self.touches = 0

    pressed = False

    def send_touch(self, touches):
        down = any(t[2] for t in touches)
        if self.pressed and not down:  # a lift after a touch: one tap done (a lift alone is a frame read)
            self.touches += 1
            self.frame[:, :, 0] = min(255, 40 * self.touches)
        self.pressed = down

    def _get_screenshot_impl(self):
        return self.frame.copy()

    def save_state(self, request):
        self.states[request.args["snapshot_name"]] = self.frame.copy()
        return state_pb2.SaveStateResponse(status=state_pb2.SaveStateResponse.Status.OK)

    def load_state(self, request):
        name = request.args["snapshot_name"]
        if name not in self.states:
            return state_pb2.LoadStateResponse(status=state_pb2.LoadStateResponse.Status.NOT_FOUND,
                                               error_message=f"no state {name}")
        self.frame = self.states[name].copy()
        self.touches = int(self.frame[0, 0, 0]) // 40
        return state_pb2.LoadStateResponse(status=state_pb2.LoadStateResponse.Status.OK)


def test_android_env_save_and_load_state():
    transport = ae.AndroidEnvTransport(ae.make_fake_env((W, H), simulator_cls=StatefulSimulator))
    env = GuiEnv(AndroidDevice(transport, settle_s=0, home_on_reset=False, with_tree=False), TapThrice)
    assert env.can_snapshot
    env.reset_typed(seed=0)
    env.step_typed(Click(0.5, 0.5))
    env.step_typed(Click(0.5, 0.5))
    state = env.snapshot()
    env.step_typed(Click(0.5, 0.5))
    assert env.task.evaluate(env.device) == 1.0
    obs = env.restore(state)
    assert obs.screenshot == state.observation.screenshot and env.task.evaluate(env.device) == 0.0
    assert env.task.milestones(env.device) == [True, True, False] and env.steps == 2
    env.close()


def test_android_env_fake_simulator_without_states_is_a_snapshot_error():
    env = GuiEnv(AndroidDevice(ae.AndroidEnvTransport.fake((W, H)), settle_s=0, home_on_reset=False,
                               with_tree=False), TapThrice)
    env.reset_typed(seed=0)
    with pytest.raises(SnapshotError, match="does not support save_state"):
        env.snapshot()
    env.step_typed(Click(0.5, 0.5))  # the episode goes on
    env.close()


class SnapshotConsole(FakeConsole):
    """The fake console, also answering ``avd snapshot save`` and ``delete``."""

    def _answer(self, command: str) -> bytes:
        parts = command.split()
        if parts[:3] == ["avd", "snapshot", "save"] and len(parts) > 3:
            self.snapshots.add(parts[3])
            return b"OK\r\n"
        if parts[:3] == ["avd", "snapshot", "delete"] and len(parts) > 3:
            if parts[3] not in self.snapshots:
                return f"KO: snapshot {parts[3]} not found\r\n".encode()
            self.snapshots.discard(parts[3])
            return b"OK\r\n"
        return super()._answer(command)


def test_adb_console_snapshots_through_the_real_adb_client():
    import shutil

    adb = shutil.which("adb")
    port = free_emulator_adb_port()
    if adb is None or port is None:
        pytest.skip("needs the adb client and a free emulator port in 5555..5585")
    adbd, console = FakeAdbd(port), SnapshotConsole(port - 1, snapshots=())
    server_port = free_port()
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(server_port)}
    try:
        if not start_adb_and_wait(adb, env, adbd.serial):
            pytest.skip(f"the adb server did not list the fake {adbd.serial}")
        t = AdbTransport(AdbTarget(adbd.serial, adb_path=adb, server_port=server_port))
        assert t.can_snapshot and t.snapshot_location().endswith(adbd.serial)
        t.save_snapshot("guiagent-a")
        assert console.commands[-1] == "avd snapshot save guiagent-a" and "guiagent-a" in console.snapshots
        t.load_snapshot("guiagent-a")
        assert console.commands[-1] == "avd snapshot load guiagent-a"
        with pytest.raises(SnapshotError, match="KO: snapshot guiagent-b not found"):
            t.load_snapshot("guiagent-b")
        t.delete_snapshot("guiagent-a")
        t.delete_snapshot("guiagent-a")  # already gone: quiet
        assert "guiagent-a" not in console.snapshots
        phone = AdbTransport(AdbTarget("R58M123ABC", adb_path=adb, server_port=server_port))
        assert not phone.can_snapshot
        with pytest.raises(SnapshotError, match="not an emulator"):
            phone.save_snapshot("x")
    finally:
        adbd.close(), console.close()
        subprocess.run([adb, "kill-server"], env=env, capture_output=True, check=False, timeout=30)


class FakeWorld:
    """android_world's AsyncEnv (what ``load_and_setup_env`` returns) as the device uses it: its
    controller (android_env over the stateful fake simulator), reset and close."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.controller = ae.make_fake_env((W, H), simulator_cls=StatefulSimulator)
        self.controller.reset()

    def reset(self, go_home=False):
        pass

    def close(self):
        self.controller.close()


def test_an_androidworld_device_snapshots_through_its_controller():
    """The androidworld device keeps the name of the snapshot it boots episodes from apart from its
    snapshot() method, so an androidworld env captures and restores like any Android device (here
    android_env's save_state / load_state under android_world's controller)."""
    from emulators.android.suite import AndroidWorldDevice

    device = AndroidWorldDevice(FakeWorld(), serial="emulator-5554", snapshot="guiagent_ready", settle_s=0,
                                home_on_reset=False, with_tree=False)
    assert device.boot_snapshot == "guiagent_ready" and device.can_snapshot
    env = GuiEnv(device, TapThrice)
    env.reset_typed(seed=0)
    env.step_typed(Click(0.5, 0.5))
    state = env.snapshot()
    env.step_typed(Click(0.5, 0.5))
    env.step_typed(Click(0.5, 0.5))
    assert env.task.evaluate(env.device) == 1.0
    obs = env.restore(state)
    assert obs.screenshot == state.observation.screenshot and env.task.milestones(env.device) == [True, False, False]
    env.close()


def _emulators_at_consecutive_ports(n: int):
    """``n`` fake gRPC emulators on consecutive ports (a farm's gRPC ports are ``base + i``)."""
    for _ in range(20):
        base = random.randrange(20000, 40000)
        servers = []
        for i in range(n):
            servicer, server = FakeEmulator(), grpc.server(futures.ThreadPoolExecutor(max_workers=2))
            pb_grpc.add_EmulatorControllerServicer_to_server(servicer, server)
            spb_grpc.add_SnapshotServiceServicer_to_server(servicer, server)
            if server.add_insecure_port(f"127.0.0.1:{base + i}") != base + i:
                break
            server.start()
            servers.append((servicer, server))
        if len(servers) == n:
            return base, servers
        for _, server in servers:
            server.stop(0)
    pytest.skip("no free run of gRPC ports")


def test_androidworld_devices_of_a_farm_copy_snapshots_between_their_emulators(tmp_path, monkeypatch, caplog):
    """make_device on a farm: snapshots go through the leased emulator's gRPC snapshot service, and
    the farm's other emulators are its peers, so a state saved in one slot restores in another."""
    from emulators.android import farm
    from emulators.android import suite as aw

    base, servers = _emulators_at_consecutive_ports(2)

    class Launcher:
        @staticmethod
        def load_and_setup_env(**kwargs):
            return FakeWorld(**kwargs)

    monkeypatch.setattr(aw, "_import", lambda module: Launcher)
    monkeypatch.setattr(aw, "_use_local_forwarder_apk", lambda: None)
    path = farm.write_endpoints(farm.FarmSpec(emulators=2, grpc_base_port=base), tmp_path / "endpoints.json")
    try:
        a = aw.SUITE.make_device(farm=str(path), settle_s=0, home_on_reset=False, with_tree=False)
        b = aw.SUITE.make_device(farm=str(path), settle_s=0, home_on_reset=False, with_tree=False)
        (emu_a, _), (emu_b, _) = servers
        assert a.aw_env.kwargs["grpc_port"] == base and b.aw_env.kwargs["grpc_port"] == base + 1
        assert a.snapshot_peers == {f"127.0.0.1:{base + 1}"} and b.snapshot_peers == {f"127.0.0.1:{base}"}
        state = a.snapshot()
        assert state.data["where"] == f"grpc://127.0.0.1:{base}" and state.data["name"] in emu_a.snapshots
        b.restore(state)
        assert emu_a.pulls == [state.data["name"]] and state.data["name"] in emu_b.imported
        a.close(), b.close()
        # snapshot_copy false: android_env's own snapshots, restored on their emulator only
        c = aw.SUITE.make_device(farm=str(path), snapshot_copy="false", settle_s=0, home_on_reset=False,
                                 with_tree=False)
        assert c.snapshots_via is c.transport and not c.snapshot_peers
        assert c.snapshot().data["where"].startswith("android_env://")
        c.close()
    finally:
        for _, server in servers:
            server.stop(0)
    # an emulator whose gRPC port does not answer: android_env's snapshots, and a warning that says so
    d = aw.SUITE.make_device(farm=str(path), settle_s=0, home_on_reset=False, with_tree=False)
    assert d.snapshots_via is d.transport and "not copied between emulators" in caplog.text
    d.close()
