"""Cloudburst scheduler: function/DAG registry in Anna, DAG validation, executor choice, schedules.

Pure cores: `dag` (validation), `policy` (executor choice), `membership` (liveness, load),
`schedule` (building the per-executor schedules). Service: `server` (`python -m scheduler`).
"""
