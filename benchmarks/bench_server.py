"""The HTTP service under load on loopback, against a plain store read in the same run.

    .venv/bin/python benchmarks/bench_server.py            # full run (a few minutes)
    .venv/bin/python benchmarks/bench_server.py --quick    # fewer rounds, same shapes

Three processes: this one (seeds the store, measures the store's own reads, sends the
updates), ``tether serve`` on a SQLite file, and a load-generating client process, so
that the clients' work never shares an event loop or a GIL with the server. The client
speaks plain HTTP/1.1 over keep-alive connections (no client library in the timing), one
blocking socket per client on its own thread, reading bodies with ``recv_into`` one
buffer allocated once, as curl and browsers do; it times each request from its first
byte sent to its last byte received and does not parse the JSON (that is the reader's
work, not the server's). An asyncio ``StreamReader`` client copies every byte twice more
in Python and made the clients, not the server, the bound on full bodies.

1. Snapshot of a run whose state is 10 MiB (generated agent conversation: prose, tool
   calls, JSON rows, logs, code): the plain store read (``store.snapshot``) one at a time
   as the baseline, then 1 and 50 concurrent clients, each sending requests back to back:
   full body without gzip, with gzip, with zstd (a browser's ``Accept-Encoding``, once the
   server's background zstd build is done), and ``If-None-Match`` (304). After each
   50-client full-body run, its floor: a plain asyncio server (another process, on
   uvloop like the service, no framework, no store) sending the same bytes to the same
   clients, which is what moving that many bytes through loopback costs on this host.
   Each 50-client line gives the CPU the server and the clients used (cores). Then the
   run moves one step (a PATCH appends ~8 KiB of messages) and 1 and 50 clients that hold
   the version before it re-read it as a delta (``If-None-Match`` + ``A-IM``: 226). Then 50 clients polling once a
   second (dashboards), gzip and 304.
2. Update (PATCH a small change into a PAUSED run) on a small run and on the 10 MiB run,
   against ``store.update_state`` in this process.
3. Server-sent events fanned out to 100 subscribers of /api/events: the delay from an
   event's timestamp to its arrival at each subscriber, p50/p95 over all deliveries.
4. The server's resident memory idle, then after listing 1,000 runs page by page.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gzip
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
TARGET_MS = 50.0
BROWSER = "gzip, deflate, br, zstd"
"""What browsers send today."""
HEADERS = {"identity": "identity", "gzip": "gzip", "zstd": BROWSER, "304": "identity", "delta": BROWSER}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def ms(v: float) -> str:
    return f"{v * 1000:.1f} ms"


# == the client process ==================================================================


RECV_BUFFER = 256 * 1024
"""Each client reads into one buffer of this size, as curl and browsers do."""


class Conn:
    """One keep-alive HTTP/1.1 connection on a blocking socket, just enough of the protocol
    for the benchmark. The body is read with ``recv_into`` a buffer allocated once and
    counted, not kept: what a real client does before it decodes (curl, a browser's
    network stack), and no Python copies between the kernel and the count."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray(RECV_BUFFER)
        self.view = memoryview(self.buf)
        self.extra = b""  # bytes read past the end of a response's head

    @classmethod
    def open(cls, port: int) -> Conn:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock)

    def _head(self) -> bytes:
        got = self.extra
        while (end := got.find(b"\r\n\r\n")) < 0:
            n = self.sock.recv_into(self.view)
            if not n:
                raise ConnectionError("the server closed the connection")
            got += self.view[:n]
        self.extra = got[end + 4 :]
        return got[:end]

    def _skip(self, left: int) -> None:
        """Read and drop ``left`` body bytes."""
        if self.extra:
            used = min(left, len(self.extra))
            self.extra, left = self.extra[used:], left - used
        while left:
            n = self.sock.recv_into(self.view, min(left, RECV_BUFFER))
            if not n:
                raise ConnectionError("the server closed the connection")
            left -= n

    def _line(self) -> bytes:
        while (end := self.extra.find(b"\r\n")) < 0:
            n = self.sock.recv_into(self.view)
            if not n:
                raise ConnectionError("the server closed the connection")
            self.extra += self.view[:n]
        found, self.extra = self.extra[:end], self.extra[end + 2 :]
        return found

    def get(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], int]:
        """Status, headers and body length of one GET."""
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\n{head}\r\n".encode())
        lines = self._head().decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        got = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            if key:
                got[key.strip().lower()] = value.strip()
        size = 0
        if "content-length" in got:
            size = int(got["content-length"])
            self._skip(size)
        elif got.get("transfer-encoding") == "chunked":
            while True:
                n = int(self._line().split(b";")[0], 16)
                self._skip(n + 2)
                size += n
                if n == 0:
                    break
        return status, got, size

    def close(self) -> None:
        self.sock.close()


def worker_reads(spec: dict[str, Any]) -> dict[str, Any]:
    """``clients`` connections, each on its own thread sending ``reads`` requests back to back."""
    port, path, mode = spec["port"], spec["path"], spec["mode"]
    conns = [Conn.open(port) for _ in range(spec["clients"])]
    headers = {"Accept-Encoding": HEADERS[mode]}
    if mode == "delta":  # the version the client holds, from before the run moved
        headers |= {"If-None-Match": spec["held"], "A-IM": "tether-diff"}
    want = {"304": 304, "delta": 226}.get(mode, 200)
    status, first, size = conns[0].get(path, headers)
    assert status == (200 if mode == "304" else want), status
    if mode != "delta":  # a delta's zstd is made in the background: gzip until then
        assert first.get("content-encoding", "identity") == {"304": "identity"}.get(mode, mode), first
    if mode == "304":
        headers["If-None-Match"] = first["etag"]
    times: list[float] = []
    sizes: list[int] = []
    failed: list[BaseException] = []
    period = spec.get("period", 0.0)
    start_line = threading.Barrier(len(conns) + 1)

    def client(conn: Conn) -> None:
        start_line.wait()
        try:
            if period:
                time.sleep(random.random() * period)  # dashboards do not poll in step
            for _ in range(spec["reads"]):
                t = time.perf_counter()
                got, _, n = conn.get(path, headers)
                took = time.perf_counter() - t
                times.append(took)  # list.append is atomic
                sizes.append(n)
                assert got == want, got
                if period:
                    time.sleep(max(0.0, period - took))
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
        "body": max(sizes),
        "encoding": first.get("content-encoding", ""),
    }


async def worker_fanout(spec: dict[str, Any]) -> dict[str, Any]:
    """``subscribers`` event streams; waits for ``events`` state_updated events on each."""
    port, subscribers, events = spec["port"], spec["subscribers"], spec["events"]
    delays: list[float] = []
    conns = []
    for _ in range(subscribers):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /api/events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n")
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


async def raw_server(spec: dict[str, Any]) -> None:
    """The floor: a plain asyncio server that answers every GET with the same bytes the
    service would send (``/identity``, ``/gzip`` or ``/zstd``), no framework, no store."""
    bodies = {k: Path(v).read_bytes() for k, v in spec["bodies"].items()}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                body = bodies[head.split(b" ", 2)[1].decode().strip("/")]
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
                writer.write(body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", spec["port"])
    print("ready", flush=True)
    async with server:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # until told to stop


def worker_main() -> None:
    spec = json.loads(sys.stdin.readline())
    if spec["job"] == "rawserve":
        try:
            import uvloop  # the event loop uvicorn runs the service on, when installed
        except ImportError:
            asyncio.run(raw_server(spec))
        else:
            uvloop.run(raw_server(spec))
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


def run_measured(spec: dict[str, Any], server_pid: int) -> dict[str, Any]:
    """``run_worker`` and the CPU the server used meanwhile (cores, over the worker's run)."""
    before = cpu_seconds(server_pid)
    result = run_worker(spec)
    # the worker's wall clock covers the timed requests only; the server's CPU is read
    # around the whole worker (connecting, the first request), a slight overcount
    result["server_cpu"] = cpu_seconds(server_pid) - before
    return result


def cpu_note(r: dict[str, Any], clients: int) -> str:
    """The cores the server and the clients used; not for one client, whose timed requests
    are too few beside the untimed first one (which may build the body)."""
    if clients < 2:
        return ""
    return f"  CPU: server {r['server_cpu'] / r['wall']:.2f}, clients {r['cpu'] / r['wall']:.2f} cores"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def big_state() -> dict[str, Any]:
    """A 10 MiB (MessagePack) agent conversation, seeded: the same every run."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_stores import conversation  # the stores benchmark's generator

    return {"messages": conversation(random.Random(24), 10 * MIB), "goal": "ship"}


async def seed(url: str, runs: int) -> tuple[str, str, int]:
    """A 10 MiB PAUSED run, a small PAUSED run and ``runs`` small finished runs."""
    from tether.runtime import runtime_reducers
    from tether.state import ExecutionContext, RunStatus
    from tether.stores import open_store

    big, small = f"big-{uuid.uuid4().hex[:6]}", f"small-{uuid.uuid4().hex[:6]}"
    reg = runtime_reducers()
    state = big_state()
    async with open_store(url) as store:
        await store.commit(
            ExecutionContext(big, state, reducers=reg), node_id="work", status=RunStatus.PAUSED
        )
        ctx = ExecutionContext(small, {"messages": ["hi"], "goal": "ship"}, reducers=reg)
        await store.commit(ctx, node_id="work", status=RunStatus.PAUSED)
        for i in range(runs):
            await store.commit(
                ExecutionContext(f"many-{i:04d}", {"goal": f"run {i}"}, reducers=reg),
                status=RunStatus.COMPLETED,
            )
    import orjson

    return big, small, len(orjson.dumps(state))


def conversation_step() -> list[Any]:
    """One step's messages (a tool call and its result, about 8 KiB), from the same generator."""
    from bench_stores import conversation

    return list(conversation(random.Random(25), 8 * 1024))


def encode_json(value: Any) -> bytes:
    import orjson

    return orjson.dumps(value)


async def store_reads(url: str, run_id: str, n: int) -> tuple[list[float], list[float]]:
    """The plain store read, one at a time; and the same read plus the JSON encoding."""
    import orjson

    from tether.stores import open_store

    async with open_store(url) as store:
        plain, encoded = [], []
        for _ in range(n):
            t = time.perf_counter()
            snap = await store.snapshot(run_id)
            plain.append(time.perf_counter() - t)
            assert snap is not None
            orjson.dumps(snap.state)
            encoded.append(time.perf_counter() - t)
        return plain, encoded


async def in_process_304(url: str, run_id: str, n: int) -> float:
    """Server CPU for one 304, without sockets: the app called as ASGI in this process."""
    from tether.server import ServerSettings, create_app
    from tether.stores import open_store

    async with open_store(url) as store:
        app = create_app(ServerSettings(), store=store, tokens=[], dashboard=False)
        async with app.router.lifespan_context(app):
            path = f"/api/runs/{run_id}/snapshot"

            async def call(headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
                scope = {
                    "type": "http",
                    "asgi": {"version": "3.0"},
                    "http_version": "1.1",
                    "method": "GET",
                    "scheme": "http",
                    "path": path,
                    "raw_path": path.encode(),
                    "query_string": b"",
                    "root_path": "",
                    "headers": headers,
                    "client": ("127.0.0.1", 1),
                    "server": ("127.0.0.1", 80),
                    "state": {},
                }
                sent: list[dict[str, Any]] = []

                async def receive() -> dict[str, Any]:
                    return {"type": "http.request", "body": b"", "more_body": False}

                async def send(message: dict[str, Any]) -> None:
                    sent.append(message)

                await app(scope, receive, send)
                return sent

            first = await call([])
            tag = dict(first[0]["headers"])[b"etag"]
            for _ in range(100):
                await call([(b"if-none-match", tag)])
            start = time.process_time()
            for _ in range(n):
                answer = await call([(b"if-none-match", tag)])
                assert answer[0]["status"] == 304
            return (time.process_time() - start) / n


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


async def api_updates(base: str, run_id: str, n: int) -> list[float]:
    import httpx

    out = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        for i in range(n):
            t = time.perf_counter()
            r = await http.patch(
                f"/api/runs/{run_id}/snapshot", json={"nodeId": "work", "stateData": {"goal": str(i)}}
            )
            out.append(time.perf_counter() - t)
            assert r.status_code == 200, r.text
    return out


async def fan_out(base: str, port: int, run_id: str, subscribers: int, events: int) -> list[float]:
    import httpx

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--worker",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
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


async def list_all(base: str) -> int:
    import httpx

    n = 0
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        offset: int | None = 0
        while offset is not None:
            page = (await http.get("/api/runs", params={"limit": 500, "offset": offset})).json()
            n += len(page["items"])
            offset = page["nextOffset"]
    return n


def zstd_body(url: str) -> bytes:
    """The zstd body exactly as the server sends it, once its background build is done."""
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with httpx.stream("GET", url, headers={"Accept-Encoding": BROWSER}, timeout=60) as r:
            raw = b"".join(r.iter_raw())
            if r.headers.get("content-encoding") == "zstd":
                return raw
        time.sleep(0.5)
    raise RuntimeError("the server never served the zstd body")


def encodings_table(body: bytes, quick: bool) -> None:
    """Bytes and build time of each candidate encoding of the snapshot body, one thread."""
    import zstandard

    from tether.server.deps import GZIP_LEVEL, ZSTD_LEVEL

    candidates: list[tuple[str, int, Any]] = [
        ("gzip", level, lambda b, lv=level: gzip.compress(b, lv, mtime=0)) for level in (GZIP_LEVEL, 9)
    ]
    candidates += [
        ("zstd", level, lambda b, lv=level: zstandard.ZstdCompressor(level=lv).compress(b))
        for level in (3, 9, 12, 15, ZSTD_LEVEL)
    ]
    try:
        import brotli  # not a dependency: measured when installed
    except ImportError:
        print("   (br: the brotli package is not installed, not measured)")
    else:
        candidates += [
            ("br", level, lambda b, lv=level: brotli.compress(b, quality=lv))
            for level in ((5, 9) if quick else (5, 9, 11))
        ]
    print(
        f"   encodings of the {len(body) / MIB:.1f} MiB body (server: gzip {GZIP_LEVEL}, zstd {ZSTD_LEVEL}):"
    )
    print(f"   {'encoding':<9}{'level':>6}{'bytes':>13}{'ratio':>8}{'build':>11}")
    for name, level, pack in candidates:
        t = time.perf_counter()
        out = pack(body)
        took = time.perf_counter() - t
        print(f"   {name:<9}{level:>6}{len(out):>13,}{len(body) / len(out):>7.1f}x{ms(took):>11}")


def line(label: str, times: list[float], base: float | None = None, extra: str = "") -> tuple[float, float]:
    p50, p95 = statistics.median(times), pct(times, 95)
    ratio = f"  {p50 / base:6.2f}x the store read" if base else ""
    mark = (
        ""
        if base is None
        else ("  < 50 ms: yes" if p50 * 1000 < TARGET_MS and p95 * 1000 < TARGET_MS else "")
    )
    print(f"   {label:<44} p50 {ms(p50):>10}  p95 {ms(p95):>10}{ratio}{mark}{extra}")
    return p50, p95


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds (about a minute)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--reads", type=int, help="requests per client (default 20; 4 with --quick)")
    ap.add_argument("--subscribers", type=int, default=100)
    ap.add_argument("--events", type=int, help="events sent to the subscribers (default 30; 10 with --quick)")
    ap.add_argument("--runs", type=int, default=1_000, help="runs to list for the memory measure")
    args = ap.parse_args()
    reads = args.reads or (4 if args.quick else 20)
    events = args.events or (10 if args.quick else 30)
    tmp = tempfile.mkdtemp(prefix="bench-server-")
    url = f"sqlite:///{tmp}/server.db"
    load0 = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load0[0]:.1f} at start; Python {sys.version.split()[0]}"
    )
    big, small, json_size = await seed(url, args.runs)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.app", "serve", "--store", url, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        import httpx

        for _ in range(300):
            try:
                httpx.get(f"{base}/api/runs?limit=1", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        idle = rss_kib(proc.pid)

        print(
            f"\n1. snapshot of a run with a 10 MiB state ({json_size / MIB:.1f} MiB of JSON), {reads} reads per client"
        )
        plain, encoded = await store_reads(url, big, 10 if args.quick else 20)
        b50, _ = line("store.snapshot (plain store read, baseline)", plain)
        line("store.snapshot + orjson encode", encoded)
        path = f"/api/runs/{big}/snapshot"
        results: dict[tuple[int, str], tuple[float, float]] = {}
        body = (
            await asyncio.to_thread(httpx.get, f"{base}{path}", headers={"Accept-Encoding": "identity"})
        ).content
        Path(tmp, "identity").write_bytes(body)
        Path(tmp, "gzip").write_bytes(gzip.compress(body, 5))
        Path(tmp, "zstd").write_bytes(await asyncio.to_thread(zstd_body, f"{base}{path}"))
        encodings_table(body, args.quick)
        raw_port = free_port()
        raw = subprocess.Popen(
            [sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert raw.stdin is not None and raw.stdout is not None
        bodies = {k: str(Path(tmp, k)) for k in ("identity", "gzip", "zstd")}
        raw.stdin.write(json.dumps({"job": "rawserve", "port": raw_port, "bodies": bodies}) + "\n")
        raw.stdin.flush()
        assert raw.stdout.readline().strip() == "ready"
        labels = {
            "identity": "full body",
            "gzip": "full body, gzip",
            "zstd": "full body, zstd (browser)",
            "304": "If-None-Match -> 304",
        }
        try:
            for clients in (1, args.clients):
                for mode in ("identity", "gzip", "zstd", "304"):
                    n = reads * 10 if mode == "304" else reads  # cheap requests: more of them, steadier
                    spec = {"job": "reads", "port": port, "path": path, "clients": clients}
                    r = run_measured(spec | {"reads": n, "mode": mode}, proc.pid)
                    rps = len(r["times"]) / r["wall"]
                    results[(clients, mode)] = line(
                        f"API, {clients:>2} client(s), {labels[mode]}",
                        r["times"],
                        b50,
                        f"  {rps:6.1f} req/s, body {r['body'] / 1024:,.0f} KiB{cpu_note(r, clients)}",
                    )
                    if clients > 1 and mode != "304":  # the floor right after, same load on the host
                        spec = {"job": "reads", "port": raw_port, "path": f"/{mode}", "clients": clients}
                        r = run_measured(spec | {"reads": n, "mode": "identity"}, raw.pid)
                        p50, _ = line(
                            "   floor: same bytes, plain asyncio server",
                            r["times"],
                            b50,
                            cpu_note(r, clients),
                        )
                        print(
                            f"   {'':<44} the API's p50 is {results[(clients, mode)][0] / p50:.2f}x this floor"
                        )
        finally:
            raw.stdin.write("stop\n")
            raw.stdin.flush()
            raw.wait(timeout=20)
        for mode in ("gzip", "zstd", "304"):
            r = run_worker(
                {"job": "reads", "port": port, "path": path, "clients": args.clients, "reads": reads}
                | {"mode": mode, "period": 1.0}
            )
            line(f"API, {args.clients} clients polling 1/s, {mode}", r["times"], b50)
        # the run moves one step; clients that hold the version before it re-read it as a delta
        held = httpx.get(f"{base}{path}", headers={"Accept-Encoding": BROWSER}).headers["etag"]
        step = conversation_step()
        moved = httpx.patch(
            f"{base}{path}", json={"nodeId": "work", "stateData": {"messages": step}}, timeout=60
        )
        assert moved.status_code == 200, moved.text
        print(
            f"   the run moved one step ({len(step)} messages, {len(encode_json(step)) / 1024:.1f} KiB of "
            f"JSON appended); clients holding the version before it send If-None-Match and A-IM"
        )
        for clients in (1, args.clients):
            spec = {"job": "reads", "port": port, "path": path, "clients": clients, "held": held}
            r = run_measured(spec | {"reads": reads * 10, "mode": "delta"}, proc.pid)
            rps = len(r["times"]) / r["wall"]
            results[(clients, "delta")] = line(
                f"API, {clients:>2} client(s), delta read (226)",
                r["times"],
                b50,
                f"  {rps:6.1f} req/s, body {r['body'] / 1024:,.1f} KiB{cpu_note(r, clients)}",
            )
        cpu = await in_process_304(url, big, 500 if args.quick else 3000)
        print(f"   server CPU for one 304, in-process (ASGI call, no socket): {cpu * 1000:.3f} ms")
        import zstandard

        packed, packed_z = Path(tmp, "gzip").read_bytes(), Path(tmp, "zstd").read_bytes()
        t = time.perf_counter()
        gzip.decompress(packed)
        t_gz = time.perf_counter() - t
        t = time.perf_counter()
        zstandard.ZstdDecompressor().decompress(packed_z)
        t_zst = time.perf_counter() - t
        print(
            f"   (gzip: {len(body) / MIB:.1f} MiB -> {len(packed) / MIB:.2f} MiB, zstd {len(packed_z) / MIB:.2f} "
            f"MiB; a client decodes them in {ms(t_gz)} and {ms(t_zst)}, not in the times above; the floor is "
            "a plain asyncio server sending the same bytes to the same clients: no framework, no store)"
        )

        print("\n2. update while PAUSED (one client, one at a time)")
        n = 10 if args.quick else 30
        for name, rid in (("small run", small), ("10 MiB run", big)):
            b = await store_updates(url, rid, n)
            a = await api_updates(base, rid, n)
            line(f"{name}: store.update_state", b)
            line(
                f"{name}: PATCH /snapshot",
                a,
                None,
                f"  ({statistics.median(a) / statistics.median(b):.2f}x the store)",
            )

        print(f"\n3. events fanned out to {args.subscribers} subscribers ({events} events)")
        delays = await fan_out(base, port, small, args.subscribers, events)
        print(
            f"   delivery delay over {len(delays)} deliveries: p50 {ms(statistics.median(delays))}  "
            f"p95 {ms(pct(delays, 95))}  max {ms(max(delays))}"
        )

        print("\n4. server memory")
        before_list = rss_kib(proc.pid)
        listed = 0
        for _ in range(3):
            listed = await list_all(base)
        after = rss_kib(proc.pid)
        print(
            f"   RSS idle {idle / 1024:.1f} MiB; after sections 1-3 {before_list / 1024:.1f} MiB; after listing "
            f"{listed} runs 3 times {after / 1024:.1f} MiB ({(after - before_list) / 1024:+.1f} MiB)"
        )

        print("\ntarget: snapshot read of the 10 MiB run, p50 and p95 < 50 ms under 50 concurrent clients")
        for mode, label in (
            ("zstd", "full body, zstd (the target line)"),
            ("gzip", "full body, gzip"),
            ("identity", "full body"),
            ("304", "304"),
            ("delta", "delta after one step (226)"),
        ):
            p50, p95 = results[(args.clients, mode)]
            verdict = "met" if max(p50, p95) * 1000 < TARGET_MS else "not met"
            print(f"   {label:<34} p50 {ms(p50):>10}  p95 {ms(p95):>10}  {verdict}")
        print(f"machine: load average {os.getloadavg()[0]:.1f} at end")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker_main()
    else:
        asyncio.run(main())
