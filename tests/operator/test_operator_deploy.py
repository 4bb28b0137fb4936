"""Issue 12 §5: deploy files that work as written.

* every Kubernetes manifest validates against the Kubernetes schema (``kubernetes-validate``
  ships the schemas: no network, no cluster), strictly (unknown fields are errors);
* the compose file validates against the compose-spec schema ``check-jsonschema`` ships;
* no manifest holds a Secret (they are created by ``kubectl create secret``, so
  ``kubectl apply -f deploy/k8s/`` never overwrites them), the image has an explicit pull
  policy, the pod name is the replica name;
* the container image is run outside Docker: the build context is what ``.dockerignore``
  lets through, installed into a fresh venv as the Dockerfile's ``RUN`` does, then its
  ``ENTRYPOINT``/``CMD`` serve with the Dockerfile's ``ENV``, its ``HEALTHCHECK`` command
  answers, and SIGTERM stops it cleanly.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from opcli import REPO, free_port

yaml = pytest.importorskip("yaml")
kv = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[dev]'")

DEPLOY = REPO / "deploy"
K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("path", K8S, ids=[p.name for p in K8S])
def test_manifest_matches_the_kubernetes_schema(path):
    version = kv.utils.latest_version()
    for doc in _docs(path):
        kv.validate(doc, version, strict=True)  # raises ValidationError with the field
        assert doc["kind"] != "Secret", "secrets are created by command, not by manifest"


def test_a_typo_in_a_manifest_is_caught():
    (dep,) = _docs(DEPLOY / "k8s" / "deployment.yaml")
    dep["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    with pytest.raises(kv.ValidationError):
        kv.validate(dep, kv.utils.latest_version(), strict=True)


def test_deployment_is_complete_and_its_secrets_are_documented():
    (dep,) = _docs(DEPLOY / "k8s" / "deployment.yaml")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["imagePullPolicy"] in ("IfNotPresent", "Never", "Always")
    assert not c["image"].endswith(":latest")
    env = {e["name"]: e for e in c["env"]}
    assert env["ULDP_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "POD_NAME" not in env
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    secrets |= {e["secretRef"]["name"] for e in c["envFrom"] if "secretRef" in e}
    readme = (DEPLOY / "README.md").read_text()
    for name in secrets:  # each one has its create command in the docs
        assert f"kubectl create secret generic {name}" in readme, name
    assert not (DEPLOY / "k8s" / "secret.yaml").exists()
    # `uldp collector serve` reads ULDP_NAME as --name
    from uldp.collector.cli.app import build_parser
    os.environ["ULDP_NAME"] = "pod-xyz"
    try:
        a = build_parser().parse_args(["collector", "serve"])
    finally:
        del os.environ["ULDP_NAME"]
    assert a.name == "pod-xyz"


def test_compose_file_matches_the_compose_spec():
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).parent /
                                                   "check-jsonschema")
    if not Path(exe).exists():
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    r = subprocess.run([exe, "--builtin-schema", "vendor.compose-spec",
                        str(DEPLOY / "compose.yaml")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    (doc,) = _docs(DEPLOY / "compose.yaml")
    assert doc["services"]["collector"]["environment"]["ULDP_NAME"]


# ---- the shuffler (shuffle mode, issue 25) -------------------------------------------------
def _shuffler_args(args: list[str]) -> object:
    """``uldp shuffler serve ARGS`` parsed by the real parser (every flag must exist)."""
    from uldp.collector.cli.app import build_parser
    return build_parser().parse_args(args)


def test_shuffler_manifests_run_the_real_command_with_its_own_secrets_only():
    """k8s: a one-replica StatefulSet with a claim for its SQLite file, its own secrets
    (documented create commands), none of the collector's; the collector's port for it is
    in the collector's Service and ConfigMap. Its args parse with `uldp shuffler serve`."""
    docs = _docs(DEPLOY / "k8s" / "shuffler.yaml")
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert sts["spec"]["replicas"] == 1 and sts["spec"]["volumeClaimTemplates"]
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    a = _shuffler_args(c["args"])
    assert a.attestation_key_file and a.ticket_key_file and a.metrics_token_file
    assert a.collector == "uldp-collector:50052" and a.db.startswith("/var/lib/uldp-shuffler")
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"uldp-shuffler-tls", "uldp-shuffler-keys"}
    header = (DEPLOY / "k8s" / "shuffler.yaml").read_text()
    for name in secrets:
        assert f"kubectl create secret generic {name}" in header, name
    assert {p["name"] for p in svc["spec"]["ports"]} == {"grpc", "https"}
    (cs,) = _docs(DEPLOY / "k8s" / "service.yaml")
    assert 50052 in {p["port"] for p in cs["spec"]["ports"]}
    (cm,) = _docs(DEPLOY / "k8s" / "configmap.yaml")
    assert cm["data"]["ULDP_SHUFFLER_PORT"] == "50052"
    os.environ.update(ULDP_SHUFFLER_PORT="50052", ULDP_SHUFFLER_CA="/x/ca.pem")
    try:  # the collector reads them as --shuffler-port / --shuffler-ca
        from uldp.collector.cli.app import build_parser
        col = build_parser().parse_args(["collector", "serve"])
    finally:
        del os.environ["ULDP_SHUFFLER_PORT"], os.environ["ULDP_SHUFFLER_CA"]
    assert (col.shuffler_port, col.shuffler_ca) == (50052, "/x/ca.pem")


def test_shuffler_compose_service_and_systemd_unit():
    (doc,) = _docs(DEPLOY / "compose.yaml")
    sh = doc["services"]["shuffler"]
    assert sh["profiles"] == ["shuffle"]
    assert not any(v.split(":")[0] in ("tls", "admin") for v in sh["volumes"])
    a = _shuffler_args(sh["command"])
    assert a.collector == "collector:50052" and a.attestation_key_file
    col = doc["services"]["collector"]["command"]
    assert "--shuffler-port" in col and "--shuffler-ca" in col
    unit = (DEPLOY / "systemd" / "uldp-shuffler.service").read_text()
    assert "UMask=0077" in unit and "User=uldp-shuffler" in unit
    exec_line = re.search(r"^ExecStart=(.*?)(?<!\\)$", unit, re.M | re.S).group(1)
    argv = shlex.split(exec_line.replace("\\\n", " ").replace("${ULDP_COLLECTOR}",
                                                                 "collector.example:50052"))
    assert argv[:3] == ["/opt/uldp/bin/uldp", "shuffler", "serve"]
    a = _shuffler_args(argv[1:])
    assert a.ticket_key_file == "/etc/uldp/shuffler/ticket.key" and a.attestation_key_file


# ---- the image, outside Docker ------------------------------------------------------------
def _dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [x.strip() for x in lines if x.strip() and not x.startswith("#")]


def _ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's matching for the patterns used here (no '!' exceptions): a pattern names
    a path from the context root, ``**/`` matches any number of directories, and an
    ignored directory ignores everything below it."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
    for pat in patterns:
        assert not pat.startswith("!"), "exceptions are not emulated here"
        pat = pat.rstrip("/")
        for pre in prefixes:
            if fnmatch.fnmatchcase(pre, pat) or (pat.startswith("**/") and (
                    fnmatch.fnmatchcase(pre, pat[3:]) or
                    fnmatch.fnmatchcase(pre.rsplit("/", 1)[-1], pat[3:]))):
                return True
    return False


def _build_context(dest: Path) -> list[str]:
    patterns = _dockerignore()
    copied = []
    for dirpath, dirnames, filenames in os.walk(REPO):
        rel_dir = os.path.relpath(dirpath, REPO)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = [d for d in dirnames if not _ignored(rel_dir + d, patterns)]
        for f in filenames:
            rel = rel_dir + f
            if f == ".git" or _ignored(rel, patterns):
                continue
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
            copied.append(rel)
    return copied


def test_dockerignore_keeps_secrets_and_history_out(tmp_path):
    patterns = _dockerignore()
    for rel in (".git/config", "pki/ca.key", "tls/server.key", "tls-admin/client.pem",
                "x/admin.token", "uldp.db", "uldp.db-wal", ".venv/bin/python", "venv/lib/x.py",
                "collector/__pycache__/cli.cpython-311.pyc", "bench/results/demo.md"):
        assert _ignored(rel, patterns), rel
    for rel in ("pyproject.toml", "setup.py", "README.md", "collector/cli/app.py",
                "client/device.py", "client/wire/device.proto"):
        assert not _ignored(rel, patterns), rel


def _dockerfile() -> dict[str, object]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    runtime = text[text.rindex("\nFROM "):]  # the final stage
    env = {}
    for line in runtime.splitlines():
        if line.startswith("ENV "):
            for tok in shlex.split(line[4:]):
                k, _, v = tok.partition("=")
                env[k] = v
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    health = json.loads(re.search(r"HEALTHCHECK .*? CMD (\[.*\])", text).group(1))
    pip = re.search(r"/opt/uldp/bin/pip install --no-cache-dir '([^']+)'", text).group(1)
    return {"env": env, "entrypoint": entry, "cmd": cmd, "health": health, "pip": pip}


def test_container_entry_command_runs_outside_docker(tmp_path):
    """install (COPY . + venv + pip install, as the Dockerfile) + serve (ENTRYPOINT, CMD,
    ENV) + health (HEALTHCHECK) + stop (SIGTERM)."""
    d = _dockerfile()
    assert d["entrypoint"] == ["uldp"] and d["cmd"] == ["collector", "serve"]
    assert d["pip"] == ".[collector,postgres,scale]"
    src = tmp_path / "src"
    copied = _build_context(src)
    assert "pyproject.toml" in copied and not any(c.endswith(".key") for c in copied)
    # the venv of the image; its dependencies come from this test environment (no network
    # at test time), uldp itself is built from the build context and installed with
    # --target, which never touches this environment's own uldp
    venv = tmp_path / "opt-uldp"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-cache-dir", "--no-deps",
                        "--no-build-isolation", "--target", str(site), "-q", d["pip"]],
                       cwd=src, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert r.returncode == 0, r.stderr
    (site / "zz-deps-from-test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = site / "bin" / d["entrypoint"][0]
    uldp_exe = venv / "bin" / d["entrypoint"][0]
    uldp_exe.write_text(f"#!{venv / 'bin' / 'python'}\n" +  # the image's interpreter
                        script.read_text().split("\n", 1)[1])
    uldp_exe.chmod(0o755)
    assert "uldp.collector.cli" in uldp_exe.read_text()
    # the image's configuration: its ENV, with the paths and port of this test
    tls = tmp_path / "etc-uldp-tls"
    r = subprocess.run([str(uldp_exe), "collector", "certs", "--out", str(tls)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    port = free_port()
    image_env = dict(d["env"])  # type: ignore[arg-type]
    assert image_env["ULDP_TLS_DIR"] == "/etc/uldp/tls" and image_env["ULDP_PORT"] == "50051"
    env = {**os.environ, **image_env, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
           "ULDP_HOST": "127.0.0.1", "ULDP_PORT": str(port), "ULDP_TLS_DIR": str(tls),
           "ULDP_DB": str(tmp_path / "var-lib-uldp" / "collector.db")}
    (tmp_path / "var-lib-uldp").mkdir()
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen([*d["entrypoint"], *d["cmd"]], env=env,  # type: ignore[misc]
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=tmp_path / "var-lib-uldp")
    try:
        health = [str(x).replace("127.0.0.1:50051", f"127.0.0.1:{port}")
                  .replace("/etc/uldp/tls",
                           str(tls)) for x in d["health"]]  # type: ignore[union-attr]
        wait = subprocess.run([health[0], "collector", "wait", *health[3:], "--timeout", "120"],
                              env=env, capture_output=True, text=True, timeout=180)
        assert wait.returncode == 0, wait.stderr
        r = subprocess.run(health, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "SERVING", r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, out
    assert "listening on 127.0.0.1" in out
    db = tmp_path / "var-lib-uldp" / "collector.db"
    assert db.exists() and (db.stat().st_mode & 0o777) == 0o600
    # the installed command is the one that ran: the venv's, not the checkout's
    assert str(venv) in subprocess.run(["sh", "-c", "command -v uldp"], env=env,
                                       capture_output=True, text=True).stdout
