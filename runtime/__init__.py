"""The platform's runtime layer: the plumbing every service process shares.

Schedulers, executor nodes, workers, HydroCache, Anna's routing and nodes, and the SDK all
build on these modules; this package imports none of them (only ZeroMQ, cloudpickle and the
generated wire schema `hydro_proto`), so nothing here can form an import cycle.

- `framing`: how a message is laid out in ZeroMQ frames (Cloudburst's one-frame kind code,
  Anna's two-frame `[kind][payload]`), and `FrameError` for anything else.
- `sockets`: binding PULL sockets on free ports or Unix sockets, and `PushCache` (one
  non-blocking PUSH socket per destination).
- `rpc`: waiting, with a deadline, for the reply that carries a given request id.
- `process`: launching service processes, their ready announcement, supervising and
  stopping them.
- `logs`: logging set-up for a service process.
- `config`: how every process reads its role's configuration object (`--config PATH|JSON`,
  flags as overrides) and the errors naming a bad field.
- `limits`: a service's descriptor limit (raised to the hard limit at start) and the share
  of it its socket caches may use.
- `actors`: the actor handle (a name, plain data), so that workers can use it too.
- `auth`, `fairpool`, `http`, `cli`: authentication, a thread pool that takes turns between
  requests, a read-only metrics endpoint, command-line conventions.
What the FaaS layer means by its errors, key names and values is not plumbing: it is in
`faas/`; how a node cache's answer decodes is `hydrocache/replies.py`.
"""
