"""Cloudburst scheduler: function/DAG registry in Anna, DAG validation, executor choice,
schedules, causal-call coordination, call statistics.

Pure cores: `dag` (validation), `policy` (executor choice), `membership` (liveness, load),
`schedule` (building the per-executor schedules), `causal` (the coordinator of one causal
call), `mtcc` (each MTCC protocol's control flow: CT, OPT, CON, HB), `causal_records` (the
coordinator's actions and records), `stats` (calls, errors, latency; Prometheus text).
Services: `server` (`python -m scheduler`), `causal_calls` (carries the coordinators' actions
out), `registry` (the registry records in Anna), `gc` (dependency-metadata GC rounds).
"""
