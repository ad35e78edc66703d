"""A fake emulator for the real adb client. FakeAdbd: its adb daemon, a TCP listener on an emulator adb port (odd, 5555..5585) that answers
the adb server's CNXN with a device banner, so the real adb server lists it as ``emulator-N device``.

It also serves the ``shell`` (shell protocol v2, which the banner advertises: stdout, stderr and the
exit code come back apart) and ``exec`` services, so ``adb shell ...`` and ``adb exec-out ...`` run
their commands on a :class:`FakeAndroid`: a phone's shell answering the commands the adb transport
sends (``input``, ``wm size``, ``dumpsys input``, ``screencap``, ``am start``, ``monkey``, ``settings``)
as a real one does. The sync service (push/pull) is not spoken."""

from __future__ import annotations

import io
import shlex
import socket
import struct
import subprocess
import threading
import time

from PIL import Image

A_CNXN = 0x4E584E43
#: no trailing NUL, as adbd sends it: the adb server would take the NUL into the last feature's name
#: and not know shell_v2 (its shell then loses exit codes and stderr)
BANNER = b"device::ro.product.name=fake;ro.product.model=fake;ro.product.device=fake;features=shell_v2"


A_AUTH = 0x48545541
A_OPEN, A_OKAY, A_WRTE, A_CLSE = 0x4E45504F, 0x59414B4F, 0x45545257, 0x45534C43
#: shell protocol v2 packet ids (adb's shell_protocol.h)
SHELL_STDOUT, SHELL_STDERR, SHELL_EXIT = 1, 2, 3


def packet(cmd: int, arg0: int, arg1: int, data: bytes) -> bytes:
    """One adb protocol message: the 24-byte header, then ``data``."""
    return struct.pack("<6I", cmd, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF, cmd ^ 0xFFFFFFFF) + data


def read_message(conn: socket.socket) -> tuple[int, int, int, bytes] | None:
    """``(command, arg0, arg1, payload)`` of the next adb message on ``conn``; None when the peer closed
    the connection."""
    header = b""
    while len(header) < 24:
        chunk = conn.recv(24 - len(header))
        if not chunk:
            return None
        header += chunk
    cmd, arg0, arg1, length, _, _ = struct.unpack("<6I", header)
    data = b""
    while len(data) < length:
        chunk = conn.recv(length - len(data))
        if not chunk:
            return None
        data += chunk
    return cmd, arg0, arg1, data


def read_packet(conn: socket.socket) -> tuple[int, int] | None:
    """``(command, arg0)`` of the next adb message on ``conn`` (its payload is read and dropped);
    None when the peer closed the connection."""
    msg = read_message(conn)
    return None if msg is None else msg[:2]


def start_adb_and_wait(adb: str, env: dict[str, str], serial: str, timeout_s: float = 10.0) -> bool:
    """Start the real adb server under ``env`` and wait until it lists ``serial`` as a device;
    False when it did not within ``timeout_s`` (the caller skips)."""
    # The server is a daemon that must answer its client in time: on a loaded machine (the whole suite
    # in CI) its first start can miss that ("ADB server didn't ACK", exit 255), so a few tries, and the
    # server's own words if every one failed.
    for attempt in range(4):
        started = subprocess.run([adb, "start-server"], env=env, capture_output=True, text=True, timeout=60,
                                 check=False)
        if started.returncode == 0:
            break
        subprocess.run([adb, "kill-server"], env=env, capture_output=True, timeout=30, check=False)
        time.sleep(1.0 + attempt)
    else:
        raise RuntimeError(f"adb start-server failed 4 times (exit {started.returncode}): "
                           f"{(started.stderr or started.stdout).strip()[-600:]}")
    deadline = time.monotonic() + timeout_s
    while f"{serial}\tdevice" not in subprocess.run([adb, "devices"], env=env, capture_output=True, text=True,
                                                     check=False, timeout=30).stdout:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


class Listener:
    """A TCP listener on 127.0.0.1:``port`` that serves each connection on its own thread."""

    def __init__(self, port: int, backlog: int = 8):
        self.port = port
        self.conns: list[socket.socket] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(backlog)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError


def free_emulator_adb_port() -> int | None:
    for port in range(5585, 5555, -2):  # the adb server scans odd ports 5555..5585 for emulators
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        with socket.socket() as s:  # its console port (the even one below) must be free too
            try:
                s.bind(("127.0.0.1", port - 1))
            except OSError:
                continue
        return port
    return None


class FakeAndroid:
    """The shell of a fake phone, as ``adb shell`` / ``adb exec-out`` reach it.

    A portrait ``width`` x ``height`` display that ``settings put system user_rotation N`` turns (as
    android_world's ``change_orientation`` does); ``wm size`` reports the portrait size whatever the
    rotation, ``dumpsys input`` the logical frame of the display as it is turned (with a display-less
    touch device listed first, ``[0, 0, 0, 0]``, as on a real emulator), ``screencap -p`` a frame of that
    size. ``input`` records what it was asked in ``inputs``; ``input draganddrop`` picks up the home
    screen ``icons`` within reach of its start and drops them at its end (it holds past the long-press
    timeout first), a swipe moves none. ``am start -n`` / ``monkey -p`` start what ``components`` holds
    (``started``); anything else is ``sh``'s "not found", exit 127.
    """

    #: what ``am start`` and ``monkey`` find installed by default
    COMPONENTS = ("com.android.settings/.Settings",
                  "net.gsantner.markor/net.gsantner.markor.activity.MainActivity",
                  "org.tasks/com.todoroo.astrid.activity.MainActivity",
                  "com.google.android.deskclock/com.android.deskclock.DeskClock")

    def __init__(self, width: int = 1080, height: int = 2400, components: tuple[str, ...] = COMPONENTS):
        self.natural = (width, height)
        self.rotation = 0
        self.components = {self.full_component(c) for c in components}
        self.commands: list[str] = []  # every shell command line, as the device received it
        self.inputs: list[list[str]] = []  # the arguments of every accepted ``input``
        self.typed: list[str] = []  # what ``input text`` typed (``%s`` is a space)
        self.started: list[str] = []  # components / packages started
        self.icons: dict[str, tuple[int, int]] = {"Markor": (200, 1800)}

    @staticmethod
    def full_component(component: str) -> str:
        """``pkg/.Main`` -> ``pkg/pkg.Main``: the two spellings ``am start -n`` takes for one activity."""
        package, _, activity = component.partition("/")
        return f"{package}/{package}{activity}" if activity.startswith(".") else component

    @property
    def logical_size(self) -> tuple[int, int]:
        w, h = self.natural
        return (h, w) if self.rotation % 2 else (w, h)

    def dumpsys_input(self) -> str:
        w, h = self.logical_size
        return (
            "INPUT MANAGER (dumpsys input)\n\n"
            "Input Manager Service (Java) State:\n  Interactive: true\n\n"
            "Event Hub State:\n  BuiltInKeyboardId: -2\n\n"
            "Input Reader State (Nums of device: 3):\n"
            "  Device -1: Virtual\n    Generation: 2\n    IsExternal: false\n    Sources: 0x00000301\n"
            "  Device 3: virtio_input_multi_touch_2\n    Generation: 9\n    IsExternal: false\n"
            "    Sources: 0x00001002\n    Touch Input Mapper (mode - DIRECT):\n"
            "      Viewport INTERNAL: displayId=-1, uniqueId=, port=<none>, orientation=0, "
            "logicalFrame=[0, 0, 0, 0], physicalFrame=[0, 0, 0, 0], deviceSize=[0, 0], isActive=[0]\n"
            "  Device 2: virtio_input_multi_touch_1\n    Generation: 7\n    IsExternal: false\n"
            "    Sources: 0x00001002\n    Touch Input Mapper (mode - DIRECT):\n"
            f"      Viewport INTERNAL: displayId=0, uniqueId=local:4619827259835644672, port=0, "
            f"orientation={self.rotation}, logicalFrame=[0, 0, {w}, {h}], physicalFrame=[0, 0, {w}, {h}], "
            f"deviceSize=[{w}, {h}], isActive=[1]\n"
            f"      SurfaceWidth: {w}px\n      SurfaceHeight: {h}px\n\n"
            "Input Dispatcher State:\n  DispatchEnabled: true\n"
        )

    def screencap(self) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", self.logical_size, (30, 90, 200)).save(buf, format="PNG", compress_level=1)
        return buf.getvalue()

    def run(self, command: str) -> tuple[bytes, bytes, int]:
        """``(stdout, stderr, exit code)`` of one shell command line."""
        self.commands.append(command)
        try:
            argv = shlex.split(command)
        except ValueError as e:
            return b"", f"/system/bin/sh: syntax error: {e}\n".encode(), 2
        name, args = (argv[0], argv[1:]) if argv else ("", [])
        if argv == ["wm", "size"]:
            return ("Physical size: %dx%d\n" % self.natural).encode(), b"", 0
        if argv == ["dumpsys", "input"]:
            return self.dumpsys_input().encode(), b"", 0
        if argv == ["screencap", "-p"]:
            return self.screencap(), b"", 0
        if name == "settings" and args[:2] == ["put", "system"] and len(args) == 4:
            if args[2] == "user_rotation":
                self.rotation = int(args[3]) % 4
            return b"", b"", 0
        if name == "input":
            return self.input(args)
        if name == "am" and args[:1] == ["start"] and "-n" in args:
            component = self.full_component(args[args.index("-n") + 1])
            if component not in self.components:
                return (f"Starting: Intent {{ cmp={component} }}\nError: Activity class {{{component}}} "
                        "does not exist.\n").encode(), b"", 0
            self.started.append(component)
            return f"Starting: Intent {{ cmp={component} }}\nStatus: ok\n".encode(), b"", 0
        if name == "monkey" and args[:1] == ["-p"]:
            package = args[1]
            if not any(c.split("/")[0] == package for c in self.components):
                return b"  bash arg: -p\n** No activities found to run, monkey aborted.\n", b"", 251
            self.started.append(package)
            return b"  bash arg: -p\nEvents injected: 1\n", b"", 0
        return b"", f"/system/bin/sh: {name}: inaccessible or not found\n".encode(), 127

    def input(self, args: list[str]) -> tuple[bytes, bytes, int]:
        """Android's ``input`` command: an unknown command is refused as ``InputShellCommand`` does."""
        if args[:1] in (["touchscreen"], ["keyboard"]):
            args = args[1:]
        command, rest = (args[0], args[1:]) if args else ("", [])
        shapes = {"tap": (2,), "swipe": (4, 5), "draganddrop": (4, 5), "text": (1,), "keyevent": None,
                  "keycombination": None}
        if command not in shapes:
            return b"", f"Unknown command: {command}\n".encode(), 255
        counts = shapes[command]
        numeric = command != "text"
        if (counts is not None and len(rest) not in counts) or not rest or \
                (numeric and not all(a.lstrip("-").isdigit() for a in rest)):
            return b"", f"Error: Invalid arguments for command: {command}\n".encode(), 255
        self.inputs.append([command, *rest])
        if command == "text":
            self.typed.append(rest[0].replace("%s", " "))
        elif command == "draganddrop":
            x1, y1, x2, y2 = map(int, rest[:4])
            for name, (x, y) in self.icons.items():
                if abs(x - x1) <= 60 and abs(y - y1) <= 60:
                    self.icons[name] = (x2, y2)
        return b"", b"", 0


class FakeAdbd(Listener):
    def __init__(self, port: int, device: FakeAndroid | None = None):
        self.serial = f"emulator-{port - 1}"
        self.device = device or FakeAndroid()
        super().__init__(port)

    def _output(self, service: str) -> list[bytes] | None:
        """What the device sends back on a stream opened for ``service``, in payload order (None: refused).

        ``shell,v2,...:CMD``: stdout, stderr and the exit code as shell-protocol packets; ``shell:CMD``
        (protocol v1) and ``exec:CMD``: the bare output, the exit code lost as on a real device."""
        kind, _, command = service.partition(":")
        if kind.split(",")[0] not in ("shell", "exec"):
            return None
        out, err, code = self.device.run(command)
        if "v2" not in kind.split(","):
            return [out + (err if kind.startswith("shell") else b"")]
        packets = []
        for ident, data in ((SHELL_STDOUT, out), (SHELL_STDERR, err)):
            for i in range(0, len(data), 64 * 1024):
                piece = data[i:i + 64 * 1024]
                packets.append(bytes([ident]) + len(piece).to_bytes(4, "little") + piece)
        return packets + [bytes([SHELL_EXIT]) + (1).to_bytes(4, "little") + bytes([code & 0xFF])]

    def _serve(self, conn: socket.socket) -> None:
        streams: dict[int, tuple[int, list[bytes]]] = {}  # our stream id -> (the host's, payloads left)
        max_data, next_id = 4096, 1

        def send_next(local: int) -> None:
            remote, payloads = streams[local]
            if payloads:  # one WRTE at a time: the next once the host said OKAY
                chunk = payloads[0][:max_data]
                payloads[0] = payloads[0][max_data:]
                if not payloads[0]:
                    payloads.pop(0)
                conn.sendall(packet(A_WRTE, local, remote, chunk))
            else:
                del streams[local]
                conn.sendall(packet(A_CLSE, local, remote, b""))

        with conn:
            try:
                while (msg := read_message(conn)) is not None:
                    cmd, arg0, arg1, data = msg
                    if cmd == A_CNXN:
                        max_data = min(arg1 or 4096, 256 * 1024)
                        conn.sendall(packet(A_CNXN, 0x01000001, 256 * 1024, BANNER))
                    elif cmd == A_OPEN:
                        payloads = self._output(data.rstrip(b"\0").decode("utf-8", "replace"))
                        if payloads is None:
                            conn.sendall(packet(A_CLSE, 0, arg0, b""))
                            continue
                        local, next_id = next_id, next_id + 1
                        streams[local] = (arg0, [p for p in payloads if p])
                        conn.sendall(packet(A_OKAY, local, arg0, b""))
                        send_next(local)
                    elif cmd == A_OKAY and arg1 in streams:
                        send_next(arg1)
                    elif cmd == A_WRTE:  # the host's stdin (or a window size): taken and dropped
                        conn.sendall(packet(A_OKAY, arg1, arg0, b""))
                    elif cmd == A_CLSE:
                        streams.pop(arg1, None)
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:  # the device goes away: the adb server drops its transport
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


class FakeConsole(Listener):
    """A fake emulator console on ``port`` (the even port below the adb one): the real ``adb emu ...``
    connects to it, sends the command and ``quit``; ``snapshots`` names the snapshots that load."""

    def __init__(self, port: int, snapshots: tuple[str, ...] = ("guiagent_ready",)):
        self.snapshots = set(snapshots)
        self.commands: list[str] = []
        super().__init__(port, backlog=4)

    def _answer(self, command: str) -> bytes:
        parts = command.split()
        if parts[:1] == ["auth"]:
            return b"OK\r\n"
        if parts[:3] == ["avd", "snapshot", "load"]:
            name = parts[3] if len(parts) > 3 else ""
            return b"OK\r\n" if name in self.snapshots else f"KO: snapshot {name} not found\r\n".encode()
        return b"KO: unknown command\r\n"

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.sendall(b"Android Console: type 'help' for a list of commands\r\nOK\r\n")
            buf = b""
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    command = line.decode().strip()
                    if command in ("quit", "exit"):
                        conn.shutdown(socket.SHUT_RDWR)
                        return
                    self.commands.append(command)
                    conn.sendall(self._answer(command))
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()
