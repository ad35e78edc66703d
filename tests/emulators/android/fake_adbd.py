"""A fake emulator for the real adb client. FakeAdbd: its adb daemon, a TCP listener on an emulator adb port (odd, 5555..5585) that answers
the adb server's CNXN with a device banner, so the real adb server lists it as ``emulator-N device``.

Nothing else of adbd is spoken (a shell or sync service would fail): enough for checks that ask
``adb devices``, which is all a preflight does."""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
import time

A_CNXN = 0x4E584E43
BANNER = b"device::ro.product.name=fake;ro.product.model=fake;ro.product.device=fake;features=shell_v2\0"


A_AUTH = 0x48545541


def packet(cmd: int, arg0: int, arg1: int, data: bytes) -> bytes:
    """One adb protocol message: the 24-byte header, then ``data``."""
    return struct.pack("<6I", cmd, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF, cmd ^ 0xFFFFFFFF) + data


def read_packet(conn: socket.socket) -> tuple[int, int] | None:
    """``(command, arg0)`` of the next adb message on ``conn`` (its payload is read and dropped);
    None when the peer closed the connection."""
    header = b""
    while len(header) < 24:
        chunk = conn.recv(24 - len(header))
        if not chunk:
            return None
        header += chunk
    cmd, arg0, _, length, _, _ = struct.unpack("<6I", header)
    got = 0
    while got < length:
        chunk = conn.recv(length - got)
        if not chunk:
            return None
        got += len(chunk)
    return cmd, arg0


def start_adb_and_wait(adb: str, env: dict[str, str], serial: str, timeout_s: float = 10.0) -> bool:
    """Start the real adb server under ``env`` and wait until it lists ``serial`` as a device;
    False when it did not within ``timeout_s`` (the caller skips)."""
    subprocess.run([adb, "start-server"], env=env, capture_output=True, timeout=30, check=True)
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


class FakeAdbd(Listener):
    def __init__(self, port: int):
        self.serial = f"emulator-{port - 1}"
        super().__init__(port)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while (msg := read_packet(conn)) is not None:
                    if msg[0] == A_CNXN:
                        conn.sendall(packet(A_CNXN, 0x01000001, 256 * 1024, BANNER))
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
