"""deploy/ files are consistent with the CLI: they parse, the Deployment runs >= 2
replicas with gRPC-health probes, and the exact serve/health commands they use work when
configured only through the environment (as in the container image)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the deploy/ manifests")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
HEALTH = ["collector", "health", "--target", "127.0.0.1:50051", "--ca", "/etc/uldp/tls/ca.pem"]


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_kubernetes_manifests():
    (dep,) = _docs("k8s/deployment.yaml")
    assert dep["kind"] == "Deployment" and dep["spec"]["replicas"] >= 2
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["args"] == ["collector", "serve"]
    assert c["readinessProbe"]["exec"]["command"] == ["uldp", *HEALTH]
    # liveness asks the HTTP port (a gRPC handshake flood must not get the pod killed)
    live = c["livenessProbe"]["httpGet"]
    assert (live["path"], live["port"], live["scheme"]) == ("/healthz", "https", "HTTPS")
    assert {"name": "https", "containerPort": int(_docs("k8s/configmap.yaml")[0]["data"]
                                                    ["ULDP_HTTP_PORT"])} in c["ports"]
    kinds = {d["kind"] for f in ("k8s/service.yaml", "k8s/configmap.yaml") for d in _docs(f)}
    assert kinds == {"Service", "ConfigMap"}  # secrets: created by command only (issue 12)
    (cm,) = _docs("k8s/configmap.yaml")
    assert cm["data"]["ULDP_TLS_DIR"] == "/etc/uldp/tls"


def test_compose_file():
    (doc,) = _docs("compose.yaml")
    svc = doc["services"]
    assert svc["collector"]["command"][:2] == ["collector", "serve"]
    assert svc["collector"]["healthcheck"]["test"] == ["CMD", "uldp", *HEALTH]
    assert svc["collector"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in svc["postgres"]
    assert "pgdata" in doc["volumes"] and "tls" in doc["volumes"]


def test_image_and_unit_use_the_readme_commands():
    docker = (DEPLOY / "Dockerfile").read_text()
    assert "pip install --no-cache-dir '.[collector,postgres,scale]'" in docker
    assert 'CMD ["collector", "serve"]' in docker
    unit = (DEPLOY / "systemd" / "uldp-collector.service").read_text()
    assert "ExecStart=/opt/uldp/bin/uldp collector serve" in unit


def test_env_configured_serve_and_health(tmp_path):
    """The container's configuration: only environment variables, then the probe."""
    uldp = shutil.which("uldp")
    cmd = [uldp] if uldp else [sys.executable, "-m", "uldp.collector.cli"]
    tls = tmp_path / "tls"
    assert subprocess.run([*cmd, "collector", "certs", "--out", str(tls)],
                          capture_output=True).returncode == 0
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "ULDP_HOST": "127.0.0.1", "ULDP_PORT": str(port),
           "ULDP_TLS_DIR": str(tls), "ULDP_DB": str(tmp_path / "collector.db")}
    proc = subprocess.Popen([*cmd, "collector", "serve"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        health = [*cmd, "collector", "health", "--target", f"127.0.0.1:{port}", "--ca",
                  str(tls / "ca.pem")]
        end = time.monotonic() + 30
        while True:
            r = subprocess.run(health, capture_output=True, text=True)
            if r.returncode == 0 or time.monotonic() > end:
                break
            time.sleep(0.3)
        assert r.returncode == 0 and r.stdout.strip() == "SERVING", r.stderr
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    r = subprocess.run(health, capture_output=True, text=True)
    assert r.returncode == 1 and "unhealthy" in r.stderr
