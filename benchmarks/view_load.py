"""python -m benchmarks.view_load — the demo's reservation view under load, four ways and a floor, on PostgreSQL.

    python -m benchmarks.view_load [--seconds 8] [--connections 16] [--out bench-results]

Starts its own ZooKeeper (forceSync on), Redis and PostgreSQL (Debian's ``postgresql``: a cluster made with
initdb in a temporary directory, on a free port, fsync on), then serves benchmarks/view_urls.py with gunicorn
(4 sync workers), then uvicorn (4 workers, async views), and drives each with ``wrk`` (Debian's ``wrk``):
POST /reserve of one unit, on one hot SKU and on SKUs picked at random among 1,000. For each it reports
requests/s, p50/p99 latency and the oversold units: units reserved that the stock was never decremented by
(two buyers read the same stock and both wrote it minus one). Under gunicorn it also runs the ZooKeeper floor:
the same view inside a bare ephemeral-node lock (a create and a delete with raw kazoo), which is what any lock on
ZooKeeper costs a request at least. Every server it started is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import platform
import pwd
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.servers import RedisServer, exit_on_sigterm, start_zookeeper
from zklocks.testing import mntr
from zklocks.testing.runtime import stop_group
from zklocks.testing.server import free_port
from zklocks.testing.startup import poll_until

MODES = ("none", "zk", "sfu", "redis")
# The ZooKeeper floors (a bare create + delete around the transaction, raw kazoo; and the same with the demo view's
# ensure_held() check and fenced write) run in the sync server only.
SERVER_MODES = {"sync": ("none", "zk", "floorcheck", "floor", "sfu", "redis", "zkshaped"), "async": MODES}
MODE_NAMES = {
    "none": "no lock",
    "zk": "zk_lock (release_on_commit)",
    "floor": "ZooKeeper floor (create + delete)",
    "floorcheck": "ZooKeeper floor + the check (create, sync + exists, delete)",
    "zkshaped": "zk_lock in the floor's view (the floor + the check, with zk_lock as its lock)",
    "sfu": "select_for_update",
    "redis": "redis-py Lock",
}
SPREADS = (1, 1000)
STOCK = 10_000_000  # never sells out: every accepted request is one unit sold
WORKERS = 4

WRK_SCRIPT = r"""
local mode = os.getenv("BENCH_MODE")
local skus = tonumber(os.getenv("BENCH_SKUS"))
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
end
function init(args)
  math.randomseed(os.time() * 1000 + tid * 7919)
end
function request()
  local sku = "sku" .. math.random(1, skus)
  return wrk.format("POST", "/" .. mode .. "/" .. sku .. "/",
    {["Content-Type"] = "application/x-www-form-urlencoded"}, "quantity=1")
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT {\"requests\": %d, \"duration_us\": %d, \"p50_us\": %d, \"p99_us\": %d, \"max_us\": %d, " ..
    "\"non2xx\": %d, \"socket_errors\": %d}\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    e.status, e.connect + e.read + e.write + e.timeout))
end
"""


# -- PostgreSQL --


class PgCluster:
    """A throwaway PostgreSQL cluster (Debian's binaries), in its own process group, run as ``postgres``."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            raise RuntimeError("PostgreSQL is not installed: run `apt-get install -y postgresql` (make bench does)")
        self.bin = Path(found[-1]).parent
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="zklocks-pg-"))
        self.proc: subprocess.Popen | None = None
        self.user: str | None = None
        if os.getuid() == 0:  # initdb refuses to run as root
            self.user = "postgres"
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    @property
    def version(self) -> str:
        return subprocess.run([self.bin / "postgres", "--version"], capture_output=True, text=True).stdout.strip()

    def _run(self, args: list[str]) -> None:
        subprocess.run(args, check=True, user=self.user, cwd=self.dir, capture_output=True, timeout=120)

    def start(self, timeout: float = 60.0) -> PgCluster:
        data = self.dir / "data"
        self._run([str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        log = open(self.dir / "postgres.log", "ab")
        self.proc = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-k",
                str(self.dir),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=200",
            ],
            user=self.user,
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        message = f"PostgreSQL on port {self.port} did not start within {timeout}s"
        poll_until(self.accepts, self.dir / "postgres.log", message, timeout, proc=self.proc, stop=self.stop)
        return self

    def accepts(self) -> bool:
        try:
            with self.connect("postgres"):
                return True
        except Exception:  # noqa: BLE001 (psycopg's errors while it starts: not accepting connections yet)
            return False

    def connect(self, dbname: str = "shop"):
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True)

    def stop(self) -> None:
        if self.proc is None:
            return
        # SIGINT: PostgreSQL's fast shutdown (aborts sessions, checkpoints, exits).
        stop_group(self.proc, ((signal.SIGINT, 20.0), (signal.SIGKILL, 10.0)))
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the web servers --


def _http_up(url: str) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=b"quantity=1"), timeout=2)
        return True
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False


def start_web(kind: str, port: int, env: dict[str, str], logdir: Path) -> subprocess.Popen:
    if kind == "sync":
        argv = [
            sys.executable, "-m", "gunicorn", "django.core.wsgi:get_wsgi_application()",
            "--workers", str(WORKERS), "--worker-class", "sync", "--bind", f"127.0.0.1:{port}",
            "--log-level", "warning", "--backlog", "2048",
        ]  # fmt: skip
    else:
        argv = [
            sys.executable, "-m", "uvicorn", "--factory", "django.core.asgi:get_asgi_application",
            "--workers", str(WORKERS), "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
    with open(logdir / f"{kind}.log", "ab") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/{kind}/none/sku1/"
    message = f"the {kind} web server did not start within 60s"
    poll_until(lambda: _http_up(url), logdir / f"{kind}.log", message, 60, proc=proc, stop=lambda: stop_process(proc))
    return proc


def stop_process(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# -- one measurement --


def reset_stock(pg: PgCluster) -> None:
    with pg.connect() as conn:
        conn.execute("TRUNCATE shop_reservation")
        conn.execute("UPDATE shop_product SET stock = %s, fence = 0", (STOCK,))


def settle(pg: PgCluster, timeout: float = 30.0) -> None:
    """Wait until the requests still in the servers when wrk stopped have committed or rolled back."""
    last, deadline = None, time.monotonic() + timeout
    with pg.connect() as conn:
        while time.monotonic() < deadline:
            state = conn.execute(
                "SELECT (SELECT count(*) FROM shop_reservation), (SELECT sum(stock) FROM shop_product), "
                "(SELECT count(*) FROM pg_stat_activity WHERE datname = 'shop' AND state <> 'idle' "
                "AND pid <> pg_backend_pid())"
            ).fetchone()
            if state == last and state[2] == 0:
                return
            last = state
            time.sleep(0.3)


def oversold(pg: PgCluster) -> tuple[int, int]:
    """(units reserved, units reserved beyond what the stock was decremented by)."""
    settle(pg)
    with pg.connect() as conn:
        reserved = conn.execute("SELECT coalesce(sum(quantity), 0) FROM shop_reservation").fetchone()[0]
        taken = conn.execute("SELECT coalesce(sum(%s - stock), 0) FROM shop_product", (STOCK,)).fetchone()[0]
    return int(reserved), int(reserved - taken)


def touch_every_sku(url: str, skus: int = 1000) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def post(i: int) -> None:
        _http_up(f"{url}/sku{i}/")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(post, range(1, skus + 1)))


def run_wrk(
    port: int,
    kind: str,
    mode: str,
    skus: int,
    seconds: float,
    connections: int,
    script: Path,
) -> dict:
    env = dict(os.environ, BENCH_MODE=f"{kind}/{mode}", BENCH_SKUS=str(skus))
    out = subprocess.run(
        ["wrk", "-t", "2", "-c", str(connections), "-d", f"{seconds:g}s", "--timeout", "30s", "-s", str(script),
         f"http://127.0.0.1:{port}"],
        env=env, capture_output=True, text=True, timeout=seconds + 90,
    )  # fmt: skip
    match = re.search(r"^RESULT (\{.*\})$", out.stdout, re.M)
    if match is None:
        raise RuntimeError(f"wrk printed no result: {out.stdout}\n{out.stderr}")
    r = json.loads(match.group(1))
    return {
        "rps": r["requests"] / (r["duration_us"] / 1e6),
        "p50_ms": r["p50_us"] / 1000,
        "p99_ms": r["p99_us"] / 1000,
        "max_ms": r["max_us"] / 1000,
        "requests": r["requests"],
        "non2xx": r["non2xx"],
        "socket_errors": r["socket_errors"],
    }


PROCESS_KINDS = {"java": "zookeeper", "redis-server": "redis"}
CPU_KINDS = ("web", "zookeeper", "postgresql", "redis", "other")


def process_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds so far of every process on the machine, with its kind: the web server's workers ("web", any
    Python), ZooKeeper's JVM, PostgreSQL, Redis, or "other". Linux only (``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                text = f.read()
        except OSError:
            continue  # the process ended
        comm = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        if comm.startswith(("python", "gunicorn", "uvicorn")):
            kind = "web"
        elif comm.startswith("postgres"):
            kind = "postgresql"
        else:
            kind = PROCESS_KINDS.get(comm, "other")
        out[int(stat.split("/")[2])] = (kind, (int(fields[11]) + int(fields[12])) / tick)
    return out


def zk_packets(port: int) -> int:
    """Packets ZooKeeper has received so far (every request and ping of every client; ``mntr`` itself is one)."""
    return int(mntr(port)["zk_packets_received"])


def cpu_per_request(before: dict[int, tuple[str, float]], requests: int) -> dict[str, float]:
    """CPU milliseconds per request of each kind of process since ``before`` (process_cpu()). A process that
    ended in between is not counted (wrk itself, which has exited by now)."""
    totals = dict.fromkeys(CPU_KINDS, 0.0)
    for pid, (kind, seconds) in process_cpu().items():
        totals[kind] += seconds - before.get(pid, (kind, 0.0))[1]
    return {kind: round(seconds * 1000 / max(1, requests), 3) for kind, seconds in totals.items()}


def versions(pg: PgCluster) -> dict[str, str]:
    from importlib.metadata import version

    wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.split("[")[0].strip()
    return {
        "postgresql": pg.version,
        "wrk": wrk,
        **{p: version(p) for p in ("django", "gunicorn", "uvicorn", "psycopg", "kazoo", "redis")},
    }


def run(
    seconds: float = 8.0,
    connections: int = 16,
    servers: tuple[str, ...] = ("sync", "async"),
    progress=None,
    open_alias: bool = False,
    rounds: int = 1,
    modes: tuple[str, ...] | None = None,
    spreads: tuple[int, ...] = SPREADS,
):
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is not installed: run `apt-get install -y wrk` (make bench does)")
    workdir = Path(tempfile.mkdtemp(prefix="zklocks-view-bench-"))
    script = workdir / "reserve.lua"
    script.write_text(WRK_SCRIPT)
    zk = start_zookeeper()
    redis_server = RedisServer()
    pg = PgCluster()
    web: subprocess.Popen | None = None
    results: dict[str, Any] = {
        "seconds": seconds,
        "connections": connections,
        "workers": WORKERS,
        "open": open_alias,
        "rounds": rounds,
        "runs": [],
    }
    try:
        redis_server.start()
        pg.start()
        with pg.connect("postgres") as conn:
            conn.execute("CREATE DATABASE shop")
        env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="benchmarks.view_site",
            PYTHONPATH=os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
            ZKLOCKS_BENCH_HOSTS=zk.hosts,
            ZKLOCKS_BENCH_REDIS=redis_server.url,
            ZKLOCKS_BENCH_PG_PORT=str(pg.port),
            ZKLOCKS_BENCH_OPEN="1" if open_alias else "",
        )
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"], env=env, check=True, timeout=300
        )
        with pg.connect() as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO shop_product (sku, name, stock, fence) VALUES (%s, %s, %s, 0)",
                [(f"sku{i}", f"product {i}", STOCK) for i in range(1, 1001)],
            )
        results["versions"] = versions(pg)
        for kind in servers:
            port = free_port()
            web = start_web(kind, port, env, workdir)
            kind_modes = [m for m in SERVER_MODES[kind] if modes is None or m in modes]
            for mode in kind_modes:  # warm every worker's connections (ZooKeeper, Redis, PostgreSQL)
                run_wrk(port, kind, mode, 1000, 1, connections, script)
            # A shop's lock nodes exist after its first sales (empty ones are only reaped after a while): touch each
            # SKU's once, so that the figures do not count the first acquire's creation of the lock node.
            touch_every_sku(f"http://127.0.0.1:{port}/{kind}/zk")
            for skus in spreads:
                # Rounds alternate the guards, so that drift of the machine touches each alike; each row is the
                # median round (by requests/s).
                by_mode: dict[str, list[dict]] = {mode: [] for mode in kind_modes}
                for round_ in range(rounds):
                    for mode in kind_modes:
                        if progress:
                            progress(f"{kind} {MODE_NAMES[mode]}, {skus} SKU(s), round {round_ + 1}")
                        settle(pg)
                        reset_stock(pg)
                        cpu_before, packets_before = process_cpu(), zk_packets(zk.port)
                        figures = run_wrk(port, kind, mode, skus, seconds, connections, script)
                        figures["cpu_ms_per_request"] = cpu_per_request(cpu_before, figures["requests"])
                        figures["zk_requests_per_request"] = round(
                            (zk_packets(zk.port) - packets_before - 1) / max(1, figures["requests"]), 2
                        )
                        figures["reserved"], figures["oversold"] = oversold(pg)
                        by_mode[mode].append(figures)
                for mode, figures_ in by_mode.items():
                    ranked = sorted(figures_, key=lambda f: f["rps"])
                    median = ranked[len(ranked) // 2]
                    results["runs"].append(
                        {
                            "server": kind,
                            "mode": mode,
                            "skus": skus,
                            **median,
                            "rps_rounds": [f["rps"] for f in figures_],
                            "oversold_total": sum(f["oversold"] for f in figures_),
                        }
                    )
            stop_process(web)
            web = None
    finally:
        if web is not None:
            stop_process(web)
        pg.cleanup()
        redis_server.cleanup()
        zk.cleanup()
    shutil.rmtree(workdir, ignore_errors=True)  # kept when a run failed: the servers' logs say why
    return results


SERVER_NAMES = {"sync": f"gunicorn, {WORKERS} sync workers", "async": f"uvicorn, {WORKERS} workers, async views"}


def markdown(r: dict) -> str:
    out = [
        "| server | SKUs | guard | requests/s | p50 ms | p99 ms | oversold units | of no-lock throughput | errors |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run_ in r["runs"]:
        base = next(
            x["rps"]
            for x in r["runs"]
            if x["server"] == run_["server"] and x["skus"] == run_["skus"] and x["mode"] == "none"
        )
        out.append(
            f"| {SERVER_NAMES[run_['server']]} | {run_['skus']} | {MODE_NAMES[run_['mode']]} | {run_['rps']:.0f} | "
            f"{run_['p50_ms']:.1f} | {run_['p99_ms']:.1f} | {run_.get('oversold_total', run_['oversold'])} | "
            f"{run_['rps'] / base:.0%} | {run_['non2xx'] + run_['socket_errors']} |"
        )
    out.append("")
    for run_ in r["runs"]:
        if run_["mode"] not in ("zk", "zkshaped"):
            continue
        for floor in ("floorcheck", "floor"):
            other = [x for x in r["runs"] if x["server"] == run_["server"] and x["skus"] == run_["skus"]]
            for x in other:
                if x["mode"] == floor:
                    # Round by round (a round runs every guard once, seconds apart): the drift of the machine
                    # touches both sides of a ratio alike.
                    per_round = sorted(a / b for a, b in zip(run_["rps_rounds"], x["rps_rounds"], strict=True))
                    out.append(
                        f"- {SERVER_NAMES[run_['server']]}, {run_['skus']} SKU(s): {MODE_NAMES[run_['mode']]} at "
                        f"{run_['rps'] / x['rps']:.2f} of the {MODE_NAMES[floor]} (round by round: median "
                        f"{statistics.median(per_round):.2f}, {per_round[0]:.2f}-{per_round[-1]:.2f})"
                    )
    cpu_rows = [run_ for run_ in r["runs"] if run_.get("cpu_ms_per_request")]
    if cpu_rows:
        kinds = CPU_KINDS
        out += [
            "",
            "CPU ms per request by process (the median round's; every process on the machine but wrk), and the packets "
            "ZooKeeper received per request:",
            "",
            f"| server | SKUs | guard | {' | '.join(kinds)} | total | ZooKeeper requests |",
            f"| --- | ---: | --- |{' ---: |' * (len(kinds) + 2)}",
        ]
        for run_ in cpu_rows:
            cpu = run_["cpu_ms_per_request"]
            cells = " | ".join(f"{cpu.get(k, 0.0):.2f}" for k in kinds)
            out.append(
                f"| {SERVER_NAMES[run_['server']]} | {run_['skus']} | {MODE_NAMES[run_['mode']]} | {cells} | "
                f"{sum(cpu.values()):.2f} | {run_.get('zk_requests_per_request', 0.0):.2f} |"
            )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.view_load", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=8.0, help="length of one wrk run")
    p.add_argument("--connections", type=int, default=16, help="wrk connections")
    p.add_argument("--servers", default="sync,async", help="sync (gunicorn), async (uvicorn), or both")
    p.add_argument("--out", default="bench-results")
    p.add_argument("--open", action="store_true", help='an open alias (AUTH="open") instead of the default guarded one')
    p.add_argument("--rounds", type=int, default=1, help="rounds that alternate the guards; rows are medians")
    p.add_argument("--modes", default="", help=f"only these guards, comma-separated (of {', '.join(MODE_NAMES)})")
    p.add_argument("--skus", default=",".join(map(str, SPREADS)), help="the SKU spreads, comma-separated")
    args = p.parse_args(argv)
    exit_on_sigterm()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def progress(label: str) -> None:
        sys.stderr.write(f"\r{label:<60.60}")
        sys.stderr.flush()

    modes = tuple(args.modes.split(",")) if args.modes else None
    if modes is not None and "none" not in modes:
        modes = ("none", *modes)  # every row is read against the no-lock throughput
    spreads = tuple(int(n) for n in args.skus.split(","))
    r = run(
        args.seconds, args.connections, tuple(args.servers.split(",")), progress, args.open, args.rounds, modes, spreads
    )
    sys.stderr.write("\n")
    r["machine"] = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    stem = "view_load_open" if args.open else "view_load"
    (out_dir / f"{stem}.json").write_text(json.dumps(r, indent=2))
    table = markdown(r)
    (out_dir / f"{stem}.md").write_text(table)
    print(
        f"wrk -t 2 -c {args.connections}, {args.seconds:g} s per row, {args.rounds} round(s) (rows: the median; "
        f"oversold: all rounds){', open alias' if args.open else ''}; versions: {r['versions']}"
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
