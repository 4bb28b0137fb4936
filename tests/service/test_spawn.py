"""Child processes started without ``fork()`` of a process that runs gRPC
(``tests/service/spawn.py``, grpc/grpc#43055): a ``fork()`` runs grpc-core's fork
handlers, which restart its poller thread in the child, and the child's ``close_fds``
before ``exec`` then aborts it (SIGABRT, ``Epoll1Poller ... epoll_wait error: Bad file
descriptor``) — CI lost subprocess collectors at start that way."""

from __future__ import annotations

import ast
import re
import threading
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.service.conftest import start_process
from tests.service.spawn import with_nofile

ROOT = Path(__file__).resolve().parents[2]
#: Popen arguments that make Python fork() instead of vfork()
_FORKING_KW = {"preexec_fn", "user", "group", "extra_groups"}
_GROUP_KW = re.compile(r"\b(user|group|extra_groups)\s*=")
_POPEN = {"Popen", "run", "call", "check_call", "check_output"}
#: files that fork on purpose: the benchmark that counts the aborts it causes
_ALLOWED = {"bench/collector_starts.py"}


def _forks(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name in _POPEN:
            out += [(node.lineno, f"{name}({k.arg}=...)") for k in node.keywords
                    if k.arg in _FORKING_KW]
        if name in ("fork", "forkpty") and isinstance(f, ast.Attribute) \
                and getattr(f.value, "id", "") == "os":
            out.append((node.lineno, f"os.{name}()"))
        if name in ("get_context", "set_start_method") and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "fork":
            out.append((node.lineno, f"{name}('fork')"))
    return out


def test_nothing_forks_a_process_that_may_run_grpc():
    """Every process of the project (tests, benches, the collector, the device SDK,
    scripts) may run gRPC: none starts a child with fork() — no ``preexec_fn`` (nor
    ``user``/``group``/``extra_groups``) in a subprocess call, no ``os.fork``, no
    ``fork`` multiprocessing context."""
    found = []
    for top in ("collector", "client", "tests", "bench", "scripts"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            text = path.read_text()
            if rel in _ALLOWED or not ("fork" in text or "preexec_fn" in text or (
                    "subprocess" in text and _GROUP_KW.search(text))):
                continue  # (parsing only what can match: a second, not ten)
            found += [f"{rel}:{line}: {what}" for line, what in
                      _forks(ast.parse(text, filename=rel))]
    assert not found, "fork() of a process that may run gRPC (use tests/service/spawn.py " \
        "or the spawn context):\n" + "\n".join(found)


def test_children_get_their_descriptor_limit_while_grpc_is_busy(tmp_path):
    """The harness's ``start_process`` while this process serves and calls gRPC without
    pause: 40 children, each alive to run its command (with the harness before, 7 of 10
    runs of this test lost a child to SIGABRT before its exec), each with RLIMIT_NOFILE
    soft and hard = 320, each under the pid its caller knows (the flood test reads
    /proc/<pid>)."""
    cmd = ["/bin/sh", "-c", 'echo "$$ $(ulimit -Sn) $(ulimit -Hn)"']
    assert with_nofile(cmd, None) == cmd
    server = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stop = threading.Event()
    calls = [0]

    def busy() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while not stop.is_set():
                stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
                calls[0] += 1
    threads = [threading.Thread(target=busy, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    got = []
    try:
        for k in range(40):
            out = tmp_path / f"child-{k}.out"
            with open(out, "wb") as log:
                p = start_process(cmd, log, {"PATH": "/usr/bin:/bin"}, 320)
            got.append((p.pid, p.wait(timeout=60), out.read_text()))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
        server.stop(0)
    assert calls[0] > 0  # gRPC really was busy meanwhile
    bad = [(code, text[-200:]) for _, code, text in got if code != 0]
    assert not bad, bad
    assert [text.split() for _, _, text in got] == [[str(pid), "320", "320"]
                                                     for pid, _, _ in got]
