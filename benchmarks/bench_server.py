"""The HTTP service under 50 readers of a 10 MB run, against its floor and a direct store read.

    .venv/bin/python benchmarks/bench_server.py            # three runs (a few minutes)
    .venv/bin/python benchmarks/bench_server.py --quick    # one run, fewer reads, same shapes

Processes: this one (seeds a SQLite file, reads the store directly, sends the updates),
``tether serve`` on that file, a floor server, and a load-generating client process per
line, so the clients never share an event loop or a GIL with a server.

The client speaks plain HTTP/1.1 over keep-alive connections, one blocking socket per
reader on its own thread (no client library in the timing), and times each request from
its first byte sent to its **decoded body**: the bytes are received into one buffer and
then gunzipped or un-zstd'ed, as a browser must before it can use them (zlib and zstd
drop the GIL, so 50 readers decode in parallel as far as the cores allow).

The **floor** is a bare asyncio server on uvloop (the service's loop), no framework, no
store, no auth, sending the same stored bytes the service sends (fetched from the service
at the start of each run) to the same client process: what moving and decoding those bytes
costs on this host at that moment. The service's and the floor's lines are interleaved
within each round, so a burst of host noise lands on both.

The data is a seeded, realistic 10 MB agent conversation (``corpus.messages``: prose, tool
calls, JSON rows, log lines, code; never a repeated character).

Targets (ratios within one run; met when they hold in two of three runs):

- 50 readers of the 10 MB run, reader time to a decoded body: p95 <= 1.3x the floor's p95,
  for identity, gzip and zstd;
- 50 readers re-reading an unchanged run (304) and a run that moved one step (the delta,
  226): p95 <= 20 ms;
- one reader (a browser's ``Accept-Encoding``: zstd) p50 <= 1.5x a direct store read
  (``store.snapshot`` in this process, interleaved with it).

The 304 line has a floor line too (the bare server answering 304 to the same readers): what
the clients and the host cost alone, beside the absolute 20 ms target.

Other lines: the server's CPU per line (cores) and per request, one reader in every coding
and one from the floor server (the rest of its time is the reader's decoding), an update
while PAUSED against ``store.update_state``, events fanned out to 100 subscribers, the
server's memory.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Report, corpus, percentile

MB = 1_000_000
BROWSER = "gzip, deflate, br, zstd"
"""What browsers send today."""
HEADERS = {"identity": "identity", "gzip": "gzip", "zstd": BROWSER, "304": BROWSER, "delta": BROWSER}
HOST = "127.0.0.1"
"""The ``Host`` the clients send: the service answers only to loopback names without tokens."""


# == the client process ==================================================================


RECV_BUFFER = 256 * 1024


class Conn:
    """One keep-alive HTTP/1.1 connection on a blocking socket, just enough of the protocol
    for the benchmark: the body is received into one ``bytearray`` and decoded."""

    def __init__(self, sock: socket.socket, port: int) -> None:
        self.sock = sock
        self.port = port
        self.reconnects = 0
        self.scratch = bytearray(RECV_BUFFER)
        self.view = memoryview(self.scratch)
        self.extra = b""  # bytes read past the end of a response's head

    @classmethod
    def open(cls, port: int) -> Conn:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock, port)

    def _head(self) -> bytes:
        got = self.extra
        while (end := got.find(b"\r\n\r\n")) < 0:
            n = self.sock.recv_into(self.view)
            if not n:
                raise ConnectionError("the server closed the connection")
            got += self.view[:n]
        self.extra = got[end + 4 :]
        return got[:end]

    def _read(self, size: int) -> bytearray:
        """Exactly ``size`` body bytes, received straight into one buffer."""
        out = bytearray(size)
        view = memoryview(out)
        got = min(size, len(self.extra))
        view[:got] = self.extra[:got]
        self.extra = self.extra[got:]
        while got < size:
            n = self.sock.recv_into(view[got:], size - got)
            if not n:
                raise ConnectionError("the server closed the connection")
            got += n
        return out

    def _line(self) -> bytes:
        while (end := self.extra.find(b"\r\n")) < 0:
            n = self.sock.recv_into(self.view)
            if not n:
                raise ConnectionError("the server closed the connection")
            self.extra += self.view[:n]
        found, self.extra = self.extra[:end], self.extra[end + 2 :]
        return found

    def get(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes | bytearray]:
        """Status, headers and the body as received (not decoded) of one GET."""
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        request = f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n{head}\r\n".encode()
        try:
            self.sock.sendall(request)
            raw_head = self._head()
        except ConnectionError:  # an idle keep-alive connection the server closed: as browsers do, retry once
            self.sock.close()
            self.sock = Conn.open(self.port).sock
            self.extra = b""
            self.reconnects += 1
            self.sock.sendall(request)
            raw_head = self._head()
        lines = raw_head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        got = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            if key:
                got[key.strip().lower()] = value.strip()
        body: bytes | bytearray = b""
        if "content-length" in got:
            body = self._read(int(got["content-length"]))
        elif got.get("transfer-encoding") == "chunked":
            parts = bytearray()
            while True:
                n = int(self._line().split(b";")[0], 16)
                parts += self._read(n)
                self._read(2)
                if n == 0:
                    break
            body = parts
        return status, got, body

    def close(self) -> None:
        self.sock.close()


def decode(body: bytes | bytearray, coding: str) -> bytes | bytearray:
    """The body a browser hands to the page: decompressed in full."""
    if coding == "gzip":
        return zlib.decompress(body, 31)
    if coding == "zstd":
        import zstandard

        try:  # one shot when the frame says its size (the server's does): 3x faster than a stream
            return zstandard.ZstdDecompressor().decompress(body)
        except zstandard.ZstdError:
            return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    return body


def worker_reads(spec: dict[str, Any]) -> dict[str, Any]:
    """``clients`` readers, each on its own thread sending ``reads`` requests back to back,
    each timed to its decoded body."""
    port, path, mode = spec["port"], spec["path"], spec["mode"]
    conns = [Conn.open(port) for _ in range(spec["clients"])]
    headers = {"Accept-Encoding": spec.get("accept") or HEADERS[mode]}
    if mode == "delta":  # the version the client holds, from before the run moved
        headers |= {"If-None-Match": spec["held"], "A-IM": "tether-diff"}
    want = {"304": 304, "delta": 226}.get(mode, 200)
    status, first, body = conns[0].get(path, headers)
    assert status == (200 if mode == "304" else want), (status, bytes(body[:300]))
    coding = first.get("content-encoding", "identity")
    if "expect" in spec:
        assert coding == spec["expect"], (coding, spec["expect"])
    size = len(decode(body, coding))
    if mode == "304":
        headers["If-None-Match"] = first["etag"]
    times: list[float] = []
    failed: list[BaseException] = []
    start_line = threading.Barrier(len(conns) + 1)

    def client(conn: Conn) -> None:
        start_line.wait()
        try:
            for _ in range(spec["reads"]):
                t = time.perf_counter()
                got, head, raw = conn.get(path, headers)
                decode(raw, head.get("content-encoding", "identity"))
                times.append(time.perf_counter() - t)  # list.append is atomic
                assert got == want, got
        except BaseException as exc:  # reported below: a thread's exception is otherwise lost
            failed.append(exc)

    threads = [threading.Thread(target=client, args=(c,)) for c in conns]
    for th in threads:
        th.start()
    start_line.wait()
    start, cpu = time.perf_counter(), cpu_seconds()
    for th in threads:
        th.join()
    wall = time.perf_counter() - start
    cpu = cpu_seconds() - cpu
    for c in conns:
        c.close()
    if failed:
        raise failed[0]
    return {
        "times": times,
        "wall": wall,
        "cpu": cpu,
        "sent": len(body),
        "decoded": size,
        "coding": coding,
        "reconnects": sum(c.reconnects for c in conns),
    }


async def worker_fanout(spec: dict[str, Any]) -> dict[str, Any]:
    """``subscribers`` event streams; waits for ``events`` state_updated events on each."""
    port, subscribers, events = spec["port"], spec["subscribers"], spec["events"]
    delays: list[float] = []
    conns = []
    for _ in range(subscribers):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"GET /api/events HTTP/1.1\r\nHost: {HOST}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        await reader.readuntil(b"\r\n\r\n")
        conns.append((reader, writer))
    print("ready", flush=True)

    async def subscriber(reader: asyncio.StreamReader) -> None:
        got = 0
        while got < events:
            line = await reader.readline()
            if not line:
                return
            start = line.find(b"data: {")
            if start < 0:
                continue
            data = json.loads(line[start + 6 :])
            if data["kind"] != "state_updated":
                continue
            delays.append(time.time() - dt.datetime.fromisoformat(data["ts"]).timestamp())
            got += 1

    await asyncio.wait_for(asyncio.gather(*(subscriber(r) for r, _ in conns)), 300)
    for _, w in conns:
        w.close()
    return {"delays": delays}


async def floor_server(spec: dict[str, Any]) -> None:
    """The floor: a bare asyncio server answering ``GET /<coding>`` with the stored bytes
    the service sent for that coding (and its ``Content-Encoding``), nothing else."""
    bodies = {k: Path(v).read_bytes() for k, v in spec["bodies"].items()}
    heads = {
        k: b'HTTP/1.1 200 OK\r\ncontent-length: %d\r\netag: "%s"\r\n%s\r\n'
        % (len(v), k.encode(), b"" if k == "identity" else b"content-encoding: %s\r\n" % k.encode())
        for k, v in bodies.items()
    }

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                key = head.split(b" ", 2)[1].decode().strip("/")
                if b"\r\nif-none-match:" in head.lower():  # the client holds it: what a 304 costs
                    writer.write(b'HTTP/1.1 304 Not Modified\r\netag: "%s"\r\n\r\n' % key.encode())
                    continue
                writer.write(heads[key])
                writer.write(bodies[key])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", spec["port"])
    print("ready", flush=True)
    async with server:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # until told to stop


def worker_main() -> None:
    spec = json.loads(sys.stdin.readline())
    if spec["job"] == "floor":
        import uvloop  # the event loop uvicorn runs the service on

        uvloop.run(floor_server(spec))
        return
    if spec["job"] == "reads":
        print(json.dumps(worker_reads(spec)), flush=True)
        return
    print(json.dumps(asyncio.run(worker_fanout(spec))), flush=True)


def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker"], input=json.dumps(spec) + "\n", capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"client process failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# == this process ========================================================================


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int | None = None) -> float:
    """User and system CPU time of a process (this one by default), all its threads."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(spec: dict[str, Any], server_pid: int) -> dict[str, Any]:
    """``run_worker`` and the cores the server used meanwhile (a slight overcount: the
    server's CPU is read around the whole worker, its wall clock covers the timed reads)."""
    before = cpu_seconds(server_pid)
    result = run_worker(spec)
    used = cpu_seconds(server_pid) - before
    result["server_cores"] = used / result["wall"]
    result["server_ms_per_request"] = used * 1e3 / len(result["times"])
    return result


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def seed(url: str, runs: int) -> tuple[str, str]:
    """A 10 MB PAUSED run, a small PAUSED run and ``runs`` small finished runs."""
    from tether.runtime import runtime_reducers
    from tether.state import ExecutionContext, RunStatus
    from tether.stores import open_store

    big, small = f"big-{uuid.uuid4().hex[:6]}", f"small-{uuid.uuid4().hex[:6]}"
    reg = runtime_reducers()
    state = {"messages": corpus.messages(34, 10 * MB), "goal": "ship the release"}
    async with open_store(url) as store:
        await store.commit(
            ExecutionContext(big, state, reducers=reg), node_id="work", status=RunStatus.PAUSED
        )
        ctx = ExecutionContext(small, {"messages": [{"role": "user", "content": "hi"}]}, reducers=reg)
        await store.commit(ctx, node_id="work", status=RunStatus.PAUSED)
        for i in range(runs):
            await store.commit(
                ExecutionContext(f"many-{i:04d}", {"goal": f"run {i}"}, reducers=reg),
                status=RunStatus.COMPLETED,
            )
    return big, small


def stored_bodies(base: str, path: str, tmp: str) -> dict[str, str]:
    """The bytes the service sends in each coding (zstd once its background build is done),
    written to files for the floor server."""
    import httpx

    out = {}
    for coding, accept in (("identity", "identity"), ("gzip", "gzip"), ("zstd", BROWSER)):
        deadline = time.monotonic() + 300
        while True:
            with httpx.stream("GET", f"{base}{path}", headers={"Accept-Encoding": accept}, timeout=60) as r:
                raw = b"".join(r.iter_raw())
                got = r.headers.get("content-encoding", "identity")
            if got == coding:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server never served the {coding} body")
            time.sleep(0.3)
        Path(tmp, coding).write_bytes(raw)
        out[coding] = str(Path(tmp, coding))
    return out


def start_floor(bodies: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"job": "floor", "port": port, "bodies": bodies}) + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "ready"
    return proc, port


def stop_floor(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("stop\n")
    proc.stdin.flush()
    proc.wait(timeout=20)


async def store_reads(url: str, run_id: str, n: int) -> list[float]:
    """The direct store read (``store.snapshot``), one at a time, on a store opened once."""
    from tether.stores import open_store

    async with open_store(url) as store:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            snap = await store.snapshot(run_id)
            out.append(time.perf_counter() - t)
            assert snap is not None
        return out


async def store_updates(url: str, run_id: str, n: int) -> list[float]:
    from tether.runtime import runtime_reducers
    from tether.stores import open_store

    async with open_store(url) as store:
        out = []
        for i in range(n):
            t = time.perf_counter()
            await store.update_state(run_id, {"goal": f"base {i}"}, reducers=runtime_reducers())
            out.append(time.perf_counter() - t)
        return out


def api_updates(base: str, run_id: str, n: int) -> list[float]:
    import httpx

    out = []
    with httpx.Client(base_url=base, timeout=60) as http:
        for i in range(n):
            t = time.perf_counter()
            r = http.patch(
                f"/api/runs/{run_id}/snapshot", json={"nodeId": "work", "stateData": {"goal": str(i)}}
            )
            out.append(time.perf_counter() - t)
            assert r.status_code == 200, r.text
    return out


async def fan_out(base: str, port: int, run_id: str, subscribers: int, events: int) -> list[float]:
    import httpx

    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--worker", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    spec = {"job": "fanout", "port": port, "subscribers": subscribers, "events": events}
    proc.stdin.write((json.dumps(spec) + "\n").encode())
    await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    assert line.strip() == b"ready", line
    await asyncio.sleep(0.5)
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        for i in range(events):
            r = await http.patch(
                f"/api/runs/{run_id}/snapshot", json={"nodeId": "work", "stateData": {"goal": f"e{i}"}}
            )
            assert r.status_code == 200
            await asyncio.sleep(0.05)
    out = await asyncio.wait_for(proc.stdout.read(), 300)
    await proc.wait()
    delays: list[float] = json.loads(out.strip().splitlines()[-1])["delays"]
    return delays


def list_all(base: str) -> int:
    import httpx

    n = 0
    with httpx.Client(base_url=base, timeout=60) as http:
        offset: int | None = 0
        while offset is not None:
            page = http.get("/api/runs", params={"limit": 500, "offset": offset}).json()
            n += len(page["items"])
            offset = page["nextOffset"]
    return n


def p50_p95(times: list[float]) -> str:
    return f"p50 {statistics.median(times) * 1e3:.1f} / p95 {percentile(times, 95) * 1e3:.1f} ms"


def start_server(url: str, log: Path, profile: str | None) -> tuple[subprocess.Popen[bytes], str, int]:
    import httpx

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    under = ["-m", "cProfile", "-o", profile] if profile else []
    proc = subprocess.Popen(
        [sys.executable, *under, "-m", "tether.cli.app", "serve", "--store", url, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{base}/api/runs?limit=1", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    return proc, base, port


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one run, fewer reads (about a minute)")
    ap.add_argument("--runs", type=int, help="runs (default 3; 1 with --quick)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds per run (default 2; 1 with --quick)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--reads", type=int, help="requests per reader per round (default 8; 3 with --quick)")
    ap.add_argument("--subscribers", type=int, default=100)
    ap.add_argument("--events", type=int, help="events sent to the subscribers (default 30; 10 with --quick)")
    ap.add_argument("--list-runs", type=int, default=1_000, help="runs to list for the memory line")
    ap.add_argument("--only-reads", action="store_true", help="skip the update, event and memory lines")
    ap.add_argument(
        "--profile",
        metavar="FILE",
        help="run the server under cProfile and write its stats to FILE at the end (slows it: "
        "read the profile, not the figures; python -m pstats FILE)",
    )
    args = ap.parse_args()
    n_runs = args.runs or (1 if args.quick else 3)
    rounds = args.rounds or (1 if args.quick else 2)
    reads = args.reads or (3 if args.quick else 8)
    events = args.events or (10 if args.quick else 30)
    rep = Report(
        "bench_server",
        f"{args.clients} readers of a 10 MB run, timed to the decoded body, against a bare server "
        "sending the same bytes and a direct store read",
    )
    tmp = tempfile.mkdtemp(prefix="bench-server-")
    url = f"sqlite:///{tmp}/server.db"
    big, small = asyncio.run(seed(url, args.list_runs))
    log = Path(tmp, "server.log")
    proc, base, port = start_server(url, log, args.profile)
    path = f"/api/runs/{big}/snapshot"
    try:
        import httpx

        idle = rss_mib(proc.pid)
        body = httpx.get(f"{base}{path}", headers={"Accept-Encoding": "identity"}, timeout=60).content
        rep.line("snapshot body (JSON)", len(body) / MB, "MB")
        for run in rep.runs(n_runs):
            bodies = stored_bodies(base, path, tmp)
            for coding, file in bodies.items():
                rep.line(f"body sent, {coding}", Path(file).stat().st_size / MB, "MB")
            floor, floor_port = start_floor(bodies)
            pooled: dict[str, list[float]] = {}
            reconnects = 0
            cores: dict[str, list[float]] = {}
            try:
                for turn in range(rounds):
                    for coding in ("identity", "gzip", "zstd"):
                        pair = [
                            ("tether", port, path, proc.pid),
                            ("floor", floor_port, f"/{coding}", floor.pid),
                        ]
                        if (run + turn) % 2:  # each goes first as often as the other
                            pair.reverse()
                        for who, p, where, pid in pair:
                            spec = {
                                "job": "reads",
                                "port": p,
                                "path": where,
                                "clients": args.clients,
                                "reads": reads,
                                "mode": coding,
                                "expect": coding,
                            }
                            r = measured(spec, pid)
                            pooled.setdefault(f"{who} {coding}", []).extend(r["times"])
                            reconnects += r["reconnects"]
                            cores.setdefault(f"{who} {coding}", []).append(r["server_cores"])
                            cores.setdefault(f"{who} {coding} ms", []).append(r["server_ms_per_request"])
                    # one reader, the browser's codings, interleaved with the direct store read
                    pooled.setdefault("store", []).extend(asyncio.run(store_reads(url, big, 2 * reads)))
                    for coding in ("identity", "gzip", "zstd"):
                        spec = {"job": "reads", "port": port, "path": path, "clients": 1, "reads": 2 * reads}
                        r = run_worker(spec | {"mode": coding, "expect": coding})
                        pooled.setdefault(f"one {coding}", []).extend(r["times"])
                    spec = {
                        "job": "reads",
                        "port": floor_port,
                        "path": "/zstd",
                        "clients": 1,
                        "reads": 2 * reads,
                    }
                    r = run_worker(spec | {"mode": "zstd", "expect": "zstd"})
                    pooled.setdefault("one floor zstd", []).extend(r["times"])
                    spec = {"job": "reads", "port": floor_port, "path": "/zstd", "clients": args.clients}
                    r = run_worker(spec | {"reads": reads * 10, "mode": "304"})
                    pooled.setdefault("floor 304", []).extend(r["times"])
                    spec = {"job": "reads", "port": port, "path": path, "clients": args.clients}
                    r = measured(spec | {"reads": reads * 10, "mode": "304"}, proc.pid)
                    pooled.setdefault("304", []).extend(r["times"])
                    cores.setdefault("304", []).append(r["server_cores"])
                    cores.setdefault("304 ms", []).append(r["server_ms_per_request"])
                    reconnects += r["reconnects"]
            finally:
                stop_floor(floor)
            rep.section(f"{args.clients} readers, full body, time to the decoded body")
            for coding in ("identity", "gzip", "zstd"):
                mine, bare = pooled[f"tether {coding}"], pooled[f"floor {coding}"]
                c_mine, c_bare = (
                    statistics.median(cores[f"tether {coding}"]),
                    statistics.median(cores[f"floor {coding}"]),
                )
                rep.line(f"tether {coding}: p50", statistics.median(mine) * 1e3, "ms", note=p50_p95(mine))
                rep.line(f"floor  {coding}: p50", statistics.median(bare) * 1e3, "ms", note=p50_p95(bare))
                rep.line(f"server CPU, tether / floor, {coding}", c_mine, "cores", note=f"floor {c_bare:.2f}")
                rep.line(
                    f"server CPU per request, tether, {coding}",
                    statistics.median(cores[f"tether {coding} ms"]),
                    "ms",
                    note=f"floor {statistics.median(cores[f'floor {coding} ms']):.2f} ms",
                )
                rep.target(
                    f"{args.clients} readers, {coding}: p95 / floor p95",
                    percentile(mine, 95) / percentile(bare, 95),
                    goal=1.3,
                )
            rep.section("one reader against a direct store read")
            store_p50 = statistics.median(pooled["store"])
            rep.line(
                "store.snapshot (direct store read): p50",
                store_p50 * 1e3,
                "ms",
                note=p50_p95(pooled["store"]),
            )
            for coding in ("identity", "gzip", "zstd"):
                times = pooled[f"one {coding}"]
                rep.line(
                    f"one reader, {coding}: p50", statistics.median(times) * 1e3, "ms", note=p50_p95(times)
                )
            floor_one = pooled["one floor zstd"]
            rep.line(
                "one reader, zstd, from the floor server: p50",
                statistics.median(floor_one) * 1e3,
                "ms",
                note=p50_p95(floor_one) + "; the rest is the reader's decoding",
            )
            rep.target(
                "one reader (browser: zstd) p50 / store read p50",
                statistics.median(pooled["one zstd"]) / store_p50,
                goal=1.5,
            )
            rep.section(f"{args.clients} readers re-reading: 304 and the delta after one step")
            rep.line("server CPU during the 304 line", statistics.median(cores["304"]), "cores")
            rep.line("server CPU per 304", statistics.median(cores["304 ms"]), "ms")
            rep.line("idle connections the server closed (reader reconnected)", reconnects, "")
            rep.line(
                f"floor: {args.clients} readers of a bare server's 304: p95",
                percentile(pooled["floor 304"], 95) * 1e3,
                "ms",
                note=p50_p95(pooled["floor 304"]) + "; the clients' and the host's share",
            )
            rep.line(
                "tether 304: p50", statistics.median(pooled["304"]) * 1e3, "ms", note=p50_p95(pooled["304"])
            )
            rep.target(
                f"{args.clients} readers, 304: p95", percentile(pooled["304"], 95) * 1e3, goal=20, unit="ms"
            )
            held = httpx.get(f"{base}{path}", headers={"Accept-Encoding": BROWSER}, timeout=60).headers[
                "etag"
            ]
            msgs = corpus.messages(random.Random(1000 + run), 8_000)
            moved = httpx.patch(
                f"{base}{path}", json={"nodeId": "work", "stateData": {"messages": msgs}}, timeout=60
            )
            assert moved.status_code == 200, moved.text
            spec = {"job": "reads", "port": port, "path": path, "clients": args.clients, "held": held}
            r = measured(spec | {"reads": reads * 10 * rounds, "mode": "delta"}, proc.pid)
            rep.line("delta body (226)", r["sent"] / 1000, "kB", note=r["coding"])
            rep.line("server CPU during the delta line", r["server_cores"], "cores")
            rep.line("server CPU per delta read", r["server_ms_per_request"], "ms")
            rep.target(
                f"{args.clients} readers, delta (226): p95",
                percentile(r["times"], 95) * 1e3,
                goal=20,
                unit="ms",
            )
        if not args.only_reads:
            rep.section("update while PAUSED (one client, one at a time)")
            n = 10 if args.quick else 30
            for name, rid in (("small run", small), ("10 MB run", big)):
                b = asyncio.run(store_updates(url, rid, n))
                a = api_updates(base, rid, n)
                rep.line(f"{name}: store.update_state p50", statistics.median(b) * 1e3, "ms")
                rep.line(f"{name}: PATCH /snapshot p50", statistics.median(a) * 1e3, "ms")
            rep.section(f"events fanned out to {args.subscribers} subscribers ({events} events)")
            delays = asyncio.run(fan_out(base, port, small, args.subscribers, events))
            rep.line("delivery delay p50", statistics.median(delays) * 1e3, "ms", note=p50_p95(delays))
            rep.section("server memory")
            before = rss_mib(proc.pid)
            listed = 0
            for _ in range(3):
                listed = list_all(base)
            rep.line("RSS idle", idle, "MiB")
            rep.line("RSS after the reads", before, "MiB")
            rep.line(f"RSS after listing {listed} runs 3 times", rss_mib(proc.pid), "MiB")
    except BaseException:
        print(f"# the server's log ({log}), its end:\n{log.read_text()[-3000:]}")
        raise
    finally:
        # uvicorn re-raises the signal it stopped on: SIGINT ends in a KeyboardInterrupt,
        # which lets cProfile write its file; SIGTERM would kill the process first
        proc.send_signal(signal.SIGINT if args.profile else signal.SIGTERM)
        proc.wait(timeout=60)
    return rep.finish()


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker_main()
    else:
        sys.exit(main())
