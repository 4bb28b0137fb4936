"""Writes ``deploy/grafana/uldp-collector.json``, the Grafana dashboard of the collector's
metrics (``docs/operations.md``). ``tests/service/test_metrics.py`` checks that every
expression in it names a metric (and labels) a collector exports.

    python scripts/gen_dashboard.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "deploy" / "grafana" / "uldp-collector.json"
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
R = "$__rate_interval"


def panel(title: str, exprs: list[tuple[str, str]], unit: str = "short",
          kind: str = "timeseries", w: int = 12, h: int = 8, desc: str = "") -> dict[str, Any]:
    return {"type": kind, "title": title, "description": desc, "datasource": DS,
            "targets": [{"datasource": DS, "expr": e, "legendFormat": legend,
                         "refId": chr(65 + k)} for k, (e, legend) in enumerate(exprs)],
            "gridPos": {"h": h, "w": w, "x": 0, "y": 0},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": ({"legend": {"displayMode": "list", "placement": "bottom"}}
                        if kind == "timeseries" else {})}


def q(p: float, metric: str, by: str = "le", window: str = R) -> str:
    return f"histogram_quantile({p}, sum by ({by}) (rate({metric}_bucket[{window}])))"


def panels() -> list[dict[str, Any]]:
    stat = {"kind": "stat", "w": 4, "h": 4}
    return [
        panel("Replicas serving", [("count(uldp_replica_info)", "replicas")], **stat),
        panel("Reports stored (database)", [("max(uldp_reports_stored)", "stored")], **stat),
        panel("Running queries", [('max(uldp_queries{state="running"})', "running")], **stat),
        panel("Devices enrolled", [('max(uldp_devices{state="enrolled"})', "enrolled")],
              **stat),
        panel("Open phases", [('max(uldp_phases{state="open"})', "open")], **stat),
        panel("Storage commit failures (1h)",
              [("sum(increase(uldp_storage_commit_failures_total[1h]))", "failures")], **stat),
        panel("Reports accepted per second, by port",
              [(f"sum by (front) (rate(uldp_reports_accepted_total[{R}]))", "{{front}}")],
              unit="reqps", desc="Reports stored (acknowledged, first time), all replicas"),
        panel("Reports refused per second, by status code",
              [(f"sum by (code) (rate(uldp_reports_refused_total[{R}]))", "{{code}}"),
               (f"sum(rate(uldp_reports_duplicate_total[{R}]))", "duplicate (acknowledged)")],
              unit="reqps", desc="Refusals by the status codes of device.proto; duplicates "
              "are identical re-sends, acknowledged and stored once"),
        panel("Enrolments per second",
              [(f"sum by (kind, code) (rate(uldp_enrolments_total[{R}]))", "{{kind}} {{code}}")],
              unit="reqps"),
        panel("Devices by state (database)", [("max by (state) (uldp_devices)", "{{state}}")],
              desc="enrolled: the registry; assigned: waiting on a report in a running "
              "query; reported: reports in running queries"),
        panel("Errors by call",
              [(f'sum by (service, method, code) (rate(uldp_rpc_requests_total{{code!="OK"}}'
                f"[{R}]))", "{{method}} {{code}}")], unit="reqps"),
        panel("Call latency p95, by method",
              [(q(0.95, "uldp_rpc_duration_seconds", "le, method"), "{{method}}")], unit="s"),
        panel("Batch sizes p50 / p95",
              [(q(0.5, "uldp_batch_items", "le, method"), "p50 {{method}}"),
               (q(0.95, "uldp_batch_items", "le, method"), "p95 {{method}}")]),
        panel("Storage write latency (group commit)",
              [(q(0.5, "uldp_storage_commit_seconds"), "p50"),
               (q(0.99, "uldp_storage_commit_seconds"), "p99")], unit="s"),
        panel("Reports per commit",
              [(f"sum(rate(uldp_storage_commit_reports_sum[{R}])) / "
                f"sum(rate(uldp_storage_commit_reports_count[{R}]))", "mean")]),
        panel("Phase open duration p50 / p95",
              [(q(0.5, "uldp_phase_open_seconds", window="1h"), "p50"),
               (q(0.95, "uldp_phase_open_seconds", window="1h"), "p95")], unit="s",
              desc="From a phase's opening to its close"),
        panel("Phase close duration p95",
              [(q(0.95, "uldp_phase_close_seconds", window="1h"), "p95"),
               ("sum(increase(uldp_phase_close_seconds_count[1h]))", "closed per hour")],
              unit="s", desc="Claim, aggregate the stored reports, publish"),
        panel("Tasks handed out per second",
              [(f"sum by (front) (rate(uldp_tasks_issued_total[{R}]))", "{{front}}")],
              unit="reqps"),
        panel("ε requested per dataset",
              [("max by (dataset) (uldp_dataset_epsilon_requested)", "{{dataset}}")],
              kind="bargauge", desc="Sum of the ε of every query over each dataset: what a "
              "device holding it is asked for in all"),
        panel("ε per query (admin scrape)",
              [("max by (query_id, dataset, state) (uldp_query_epsilon)",
                "{{query_id}} ({{dataset}}, {{state}})")], kind="bargauge",
              desc="Only when Prometheus scrapes with the admin token"),
        panel("Phase progress (admin scrape)",
              [("max by (query_id, phase) (uldp_query_phase_reports) / "
                "max by (query_id, phase) (uldp_query_phase_quota)",
                "{{query_id}} phase {{phase}}")], unit="percentunit"),
    ]


def layout(ps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    x = y = row = 0
    for i, p in enumerate(ps):
        g = p["gridPos"]
        if x + g["w"] > 24:
            x, y, row = 0, y + row, 0
        g["x"], g["y"] = x, y
        x, row = x + g["w"], max(row, g["h"])
        p["id"] = i + 1
    return ps


def dashboard() -> dict[str, Any]:
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
                      "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana",
                        "version": "10.0.0"},
                       {"type": "datasource", "id": "prometheus", "name": "Prometheus",
                        "version": "1.0.0"}],
        "title": "uldp collector", "uid": "uldp-collector", "tags": ["uldp"],
        "timezone": "utc", "schemaVersion": 39, "version": 1, "editable": True,
        "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "description": "uldp collector: reports, refusals, enrolments, devices, latencies "
                       "and the ε asked of each dataset (docs/operations.md)",
        "templating": {"list": []}, "annotations": {"list": []},
        "panels": layout(panels()),
    }


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(dashboard(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
