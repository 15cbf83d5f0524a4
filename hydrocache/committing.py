"""The sink's side of a node cache: CAUSAL_COMMIT behind the scheduler's grant (pure).

Contract: `Committing` is mixed into `hydrocache.node_cache.NodeCache` (it uses the core's
`temp`, `keeper`, `address`, `_ops`, `_io`, `_awaiting`, `_puts`, `_ids`, `_rid_prefix`,
`_now`, `_deadline` and `_fenced`) and holds the CAUSAL_COMMIT operation (a generator run by
`hydrocache.pending.Operations`, like every causal operation):
- a COMMIT naming `grant_address` first asks that scheduler for the call's one commit
  (CAUSAL_GRANT, naming this cache as `requester`) and writes nothing unless granted: a
  refusal is `Fenced` with the scheduler's reason, no answer in time a `StageTimeout` naming
  the grant (hydrocache/DESIGN.md, "Fencing");
- the releases a grant's reply hands over (`release`, `release_timeout`: attempts of ended
  calls the scheduler held for this cache) are applied as a CAUSAL_RELEASE would be (dropped
  and fenced until then plus `TEMP_SLACK`); the granted commit itself goes on;
- the versions are written to Anna (`PutVersions`, the node's write quorum), then offered to
  the cut and subscribed, then acknowledged (one entry per key).
"""
from __future__ import annotations

import logging
from typing import Generator

from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb

from .actions import TEMP_SLACK, AskCache, PutVersions
from .pending import PutWait, RepliesWait
from .version import Version

__all__ = ["Committing"]

log = logging.getLogger("hydrocache.node_cache")


class Committing:
    """CAUSAL_COMMIT, mixed into `NodeCache`; see the module contract."""

    # ---- the sink: CAUSAL_COMMIT ----
    def _grant(self, req: pb.CacheRequest, deadline: float) -> Generator:
        """Ask the call's scheduler whether this attempt may commit (the call's one commit)."""
        rid = f"{self._rid_prefix}-{next(self._ids)}"
        scheduler = req.grant_address
        w = RepliesWait(self._awaiting, deadline)
        w.expect(rid, scheduler, list(req.keys),
                 stage=f"the commit grant of attempt {req.attempt_id} from the scheduler at "
                       f"{scheduler}")
        self._io.append(AskCache(scheduler, pb.CacheRequest(
            request_id=rid, op=pb.CAUSAL_GRANT, attempt_id=req.attempt_id,
            timeout=max(deadline - self._now, 0.001), requester=self.address)))
        yield from self._ops.wait(w)
        answer = w.answers[rid]
        if answer.status != pb.OK or answer.fenced:
            raise self._fenced(req.attempt_id, "the scheduler at "
                               f"{scheduler} did not grant its commit: "
                               f"{answer.message or pb.Status.Name(answer.status)}")
        return answer

    def _release_from(self, answer: pb.CacheResponse) -> None:
        """The releases a scheduler handed this cache with a grant: as CAUSAL_RELEASE."""
        if answer.release:
            until = self._now + answer.release_timeout + TEMP_SLACK
            for attempt in answer.release:
                self.temp.release(attempt, until)

    def _commit(self, req: pb.CacheRequest) -> Generator:
        keeper = self.keeper
        if req.grant_address:
            answer = yield from self._grant(req, self._deadline(req))
            if self.temp.fenced(req.attempt_id):
                # released while the grant travelled: the scheduler granted first, then failed
                # the call (its caller hears the commit's outcome is unknown); it still counts
                log.info("attempt %s commits after its release: granted before it",
                         req.attempt_id)
            # the grant ends the call's binds: its releases (this attempt's among them) came
            # with it; the commit, granted, goes on
            self._release_from(answer)
        versions = []
        for raw in req.writes:
            t = anna_pb2.KeyTuple.FromString(raw)
            versions.append(keeper.collected(Version.deserialize(t.key, t.payload)))
        if versions:
            token = next(self._ids)
            w = PutWait(self._puts, token, [v.key for v in versions], self._deadline(req))
            self._io.append(PutVersions(token, versions))
            yield from self._ops.wait(w)
        for v in versions:
            keeper.offer_committed(v)
        for v in versions:
            keeper.subscribe(v.key)
        response = pb.CacheResponse()
        for v in versions:
            response.entries.add(key=v.key, found=True)
        return response, []
