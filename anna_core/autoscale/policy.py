"""Anna's policy engine: Algorithms 1-5 of the dissertation (3.3) as one pure state machine.

Contract:
- `PolicyEngine(config)` keeps only what the policy must remember between periods: when the
  last node action and the last membership change happened (the grace period), the nodes it
  asked for that have not joined (`pending_adds`), the nodes it asked to leave that are still
  members (`removing`), and the replication vectors it set (bounded LRU; they win over the
  summary's view, which may lag by a period, so a key's replication never steps back because
  of stale statistics), and the bytes it moved into or out of the memory tier within the
  last `replication_cooldown` (added to the summary's memory use, for the same reason).
- `decide(summary, now) -> List[Action]` (anna_core/autoscale/actions.py) runs once per
  monitoring period on `summarize(...)`'s output. `now` is seconds on the caller's monotonic
  clock. It reads no clock, opens no socket, sleeps never and logs nothing: every decision
  and every held-back decision comes back as an action with a reason. Order: key actions
  (Promote, Demote, SetReplication), then node actions (a removal's SetReplications right
  before its RemoveNode), then Notes.
- `nodes_changed(members, now)`: membership as routing sees it ({tier: node ids}); `decide`
  calls it with the summary's members, a service may call it earlier. A node that joins
  uses up one pending addition of its tier; a node that leaves ends its removal; any change
  restarts the grace period (data is being redistributed). Pending additions and removals
  are forgotten after `pending_node_timeout` (with a Note).
- `replication_of(key)` is the vector the engine believes a key has.

Algorithm 5 as built, per `decide`:
1. storage (Alg. 3/4, storage mode): a tier above S_upper wants nodes enough to bring it to
   S_upper; the disk tier below S_lower wants to lose one node (down to max(min nodes, what
   its data needs)).
2. data movement (Alg. 1): promote disk-only keys faster than P into memory while they fit
   under the memory target occupancy. Keys that do not fit, and a memory tier above its
   target, want memory nodes; when no node can be added (budget, elasticity off) the coldest
   memory keys are demoted to make room (the LRU fallback of 3.3.1) - only keys colder than
   the ones waiting, or colder than D when the tier is merely over its target.
3. latency (Alg. 5 lines 8-14), with L_obs the configured statistic of client latency:
   above f_upper x SLO with the least occupied memory node above C_upper (every node busy),
   add ceil(N_M x min(L_obs/SLO, c)) - N_M memory nodes (at least one, Alg. 3); above
   f_upper x SLO otherwise, replicate the hot memory keys (Alg. 2); below f_lower x SLO with
   the least occupied memory node below C_lower, remove that node after reducing every
   replication that would exceed the remaining nodes (Alg. 4).
4. de-replication (Alg. 2 line 9): cooled keys return to the base vector, every period.
5. budget: a cluster over budget sheds one node (memory first) per grace period.
Node actions (at most one per tier per decision) wait for the grace period after any node
action or membership change; additions wait while earlier additions of the tier are
pending, and never pass the budget (cut to what fits, counting pending nodes); removals
wait while one of the tier is in progress or additions are pending, and never go below the
tier's minimum. Demotion and (de-)replication also wait out the grace period (3.3.3);
promotion does not. A key changed by the engine is left alone for `replication_cooldown`.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

from ..config import DISK, MEMORY, Replication
from .actions import Action, AddNodes, Note, RemoveNode, SetReplication
from .elasticity import Budget, compute_target, nodes_for_storage, reduce_for_removal
from .policy_config import TIERS, PolicyConfig
from .replication import cold_threshold, dereplicate, hot_threshold, replicate
from .summaries import KeySummary, Summary, TierSummary
from .tiering import plan_demotions, plan_promotions
from .words import amount, ms, occ

__all__ = ["PolicyEngine"]


@dataclass
class _Want:
    """A node action the rules ask for, before the gates (grace, pending, budget)."""

    kind: str                 # "add" | "remove"
    count: int = 0
    node_id: str = ""
    reason: str = ""


@dataclass
class _Round:
    """One decision in the making."""

    summary: Summary
    now: float
    keys: List[SetReplication] = field(default_factory=list)
    nodes: List[Action] = field(default_factory=list)
    notes: List[Note] = field(default_factory=list)
    wants: Dict[str, _Want] = field(default_factory=dict)

    def want_add(self, tier: str, count: int, reason: str) -> None:
        old = self.wants.get(tier)
        if count > 0 and (old is None or old.kind != "add" or count > old.count):
            self.wants[tier] = _Want("add", count, reason=reason)

    def want_remove(self, tier: str, node_id: str, reason: str) -> None:
        if tier not in self.wants:
            self.wants[tier] = _Want("remove", node_id=node_id, reason=reason)


class PolicyEngine:
    """Anna's autoscaling policy (see the module contract)."""

    def __init__(self, config: Optional[PolicyConfig] = None) -> None:
        self.config = config if config is not None else PolicyConfig()
        self.budget = Budget(self.config)
        self.last_node_action: Optional[float] = None
        self.last_membership_change: Optional[float] = None
        self.pending_adds: Dict[str, List[float]] = {MEMORY: [], DISK: []}
        self.removing: Dict[str, Tuple[str, float]] = {}
        self.members: Optional[Dict[str, FrozenSet[str]]] = None
        self._replication: "collections.OrderedDict[str, Tuple[Replication, float]]" = \
            collections.OrderedDict()
        # (when, bytes) the engine moved into (+) or out of (-) the memory tier recently: the
        # summary may not show them yet
        self._moved: "collections.deque[Tuple[float, int]]" = collections.deque(maxlen=10_000)

    # ---- queries ----------------------------------------------------------------------

    def grace_until(self) -> Optional[float]:
        """When the current grace period ends (None: there has been no node change)."""
        times = [t for t in (self.last_node_action, self.last_membership_change) if t is not None]
        return max(times) + self.config.grace_period if times else None

    def in_grace(self, now: float) -> bool:
        """Whether node actions, demotion and (de)replication are held at `now`."""
        until = self.grace_until()
        return until is not None and now < until

    def replication_of(self, key: KeySummary) -> Replication:
        """The vector the engine believes `key` has: the one it set, else the summary's."""
        tracked = self._replication.get(key.key)
        return tracked[0] if tracked else key.replication

    def layout(self, summary: Summary) -> Dict[str, int]:
        """Nodes that cost money: members (also those leaving) plus pending additions."""
        return {t: summary.tier(t).node_count + len(self.pending_adds[t]) for t in TIERS}

    def active(self, summary: Summary, tier: str) -> int:
        """Members of `tier` that are not being removed."""
        return sum(1 for n in summary.tier(tier).node_ids if n not in self.removing)

    # ---- events -----------------------------------------------------------------------

    def nodes_changed(self, members: Mapping[str, Iterable[str]], now: float) -> List[Action]:
        """Membership as routing sees it; returns Notes for what it forgets."""
        new = {t: frozenset(members.get(t, ())) for t in TIERS}
        notes: List[Action] = []
        if self.members is not None:
            changed = False
            for tier in TIERS:
                joined = new[tier] - self.members[tier]
                left = self.members[tier] - new[tier]
                changed = changed or bool(joined or left)
                for _ in joined:
                    if self.pending_adds[tier]:
                        self.pending_adds[tier].pop(0)
                for node_id in left:
                    self.removing.pop(node_id, None)
            if changed:
                self.last_membership_change = now
        self.members = new
        timeout = self.config.pending_node_timeout
        for tier in TIERS:
            late = [t for t in self.pending_adds[tier] if now - t >= timeout]
            if late:
                self.pending_adds[tier] = [t for t in self.pending_adds[tier] if now - t < timeout]
                notes.append(Note(f"{len(late)} {tier} node(s) requested {now - min(late):.0f} s "
                                  f"ago never joined; no longer counted as pending"))
        for node_id, (tier, since) in list(self.removing.items()):
            if now - since >= timeout:
                del self.removing[node_id]
                notes.append(Note(f"{tier} node {node_id} was asked to leave {now - since:.0f} s "
                                  f"ago and is still a member; it may be removed again"))
        return notes

    # ---- the decision -----------------------------------------------------------------

    def decide(self, summary: Summary, now: float) -> List[Action]:
        """One period's actions (see the module contract)."""
        r = _Round(summary, float(now))
        r.notes.extend(self.nodes_changed(  # type: ignore[arg-type]
            {MEMORY: summary.memory.node_ids, DISK: summary.disk.node_ids}, r.now))
        self._storage(r)
        self._movement(r)
        self._latency(r)
        if self.config.selective_replication:
            self._dereplicate(r)
        self._over_budget(r)
        self._carry_out_nodes(r)
        return [*r.keys, *r.nodes, *r.notes]

    # ---- rules ------------------------------------------------------------------------

    def _storage(self, r: _Round) -> None:
        """Alg. 5 lines 1-5: storage consumption against (S_lower, S_upper)."""
        for tier in TIERS:
            t = r.summary.tier(tier)
            fraction = t.storage_fraction
            if fraction is None:
                continue
            lower, upper = self.config.storage_bounds(tier)
            if fraction > upper:
                need = nodes_for_storage(t.stored_bytes, t.node_capacity_bytes, upper)
                count = need - self.layout(r.summary)[tier]
                r.want_add(tier, count, f"added {{n}} {tier} node(s): storage {occ(fraction)} of "
                                        f"capacity > S_upper {upper:g} ({amount(t.stored_bytes)} "
                                        f"needs {need} nodes)")
            elif tier == DISK and fraction < lower:
                floor = max(self.config.min_nodes(tier),
                            nodes_for_storage(t.stored_bytes, t.node_capacity_bytes, upper))
                node = self._removable(t, by_storage=True)
                if node and self.active(r.summary, tier) - 1 >= floor:
                    r.want_remove(tier, node, f"removed disk node {node}: storage "
                                              f"{occ(fraction)} of capacity < S_lower {lower:g}")

    def _movement(self, r: _Round) -> None:
        """Alg. 1: promotion, and demotion under memory pressure."""
        if not self.config.tiering:
            return
        s, cfg = r.summary, self.config
        memory = s.memory
        while self._moved and r.now - self._moved[0][0] >= cfg.replication_cooldown:
            self._moved.popleft()
        stored = max(0, memory.stored_bytes + sum(b for _, b in self._moved))
        target = (cfg.memory_target_occupancy * memory.capacity_bytes
                  if memory.capacity_bytes > 0 else None)
        room = None if target is None else max(0.0, target - stored)
        blocked = self._blocker(r.now)
        plan = plan_promotions(s.keys, self.replication_of, room, cfg, s.period, blocked,
                               self._key_room(r))
        for action in plan.promotions:
            self._set_key(r, action)
        if plan.promoted_bytes:
            self._moved.append((r.now, plan.promoted_bytes))
        if target is None:
            return
        excess = max(0.0, stored + plan.promoted_bytes - target)
        if excess <= 0 and not plan.overflow:
            return
        upper = cfg.memory_storage_bounds[1]
        if plan.overflow and cfg.elasticity:
            need = nodes_for_storage(stored + plan.overflow_bytes,
                                     memory.node_capacity_bytes, upper)
            count = max(1, need - self.layout(s)[MEMORY])
            r.want_add(MEMORY, count, f"added {{n}} memory node(s): {len(plan.overflow)} hot "
                                      f"disk keys ({amount(plan.overflow_bytes)}) do not fit "
                                      f"under the memory target occupancy "
                                      f"{cfg.memory_target_occupancy:g}")
        held = self._add_held(r, MEMORY)
        wanted = MEMORY in r.wants and r.wants[MEMORY].kind == "add"
        if held == "wait" or (wanted and not held):
            return   # memory nodes come (now, pending, or after the grace period)
        if not held:
            held = f"below S_upper {upper:g} no node is added"
        if self.in_grace(r.now):
            if plan.overflow:
                r.notes.append(Note(f"{len(plan.overflow)} hot disk keys wait for memory: "
                                    f"demotion is held until the grace period ends"))
            return   # demotion waits out the grace period (3.3.3)
        disk_nodes = self.active(s, DISK)
        if disk_nodes < cfg.fault_tolerance + 1:
            r.notes.append(Note(f"memory tier over its target occupancy but no key can be "
                                f"demoted: {disk_nodes} disk nodes < k + 1 = "
                                f"{cfg.fault_tolerance + 1}"))
            return
        why_full = (f"memory holds {amount(stored)} of "
                    f"{amount(memory.capacity_bytes)}, target occupancy "
                    f"{cfg.memory_target_occupancy:g}")
        if excess > 0:
            # between the target and S_upper only keys colder than D go; above S_upper the
            # tier is full and the coldest keys go whatever their rate (LRU, 3.3.1)
            full = stored > upper * memory.capacity_bytes
            demoted, freed = plan_demotions(s.keys, self.replication_of, excess, cfg, s.period,
                                            blocked, self._key_room(r),
                                            None if full else cfg.demote_rate(),
                                            f"{why_full}; {held}")
            for action in demoted:
                self._set_key(r, action)
            if freed:
                self._moved.append((r.now, -freed))
        if plan.overflow:
            coldest_waiting = min(k.accesses for k in plan.overflow) / s.period
            demoted, freed = plan_demotions(
                s.keys, self.replication_of, plan.overflow_bytes, cfg, s.period,
                self._blocker(r.now), self._key_room(r), coldest_waiting,
                f"making room for {len(plan.overflow)} hotter disk keys; {held}")
            for action in demoted:
                self._set_key(r, action)
            if freed:
                swapped = plan_promotions(s.keys, self.replication_of, freed, cfg, s.period,
                                          self._blocker(r.now), self._key_room(r))
                for action in swapped.promotions:
                    self._set_key(r, action)
                self._moved.append((r.now, swapped.promoted_bytes - freed))
            else:
                r.notes.append(Note(f"{len(plan.overflow)} hot disk keys wait for memory: "
                                    f"{why_full}, and no memory key is colder; {held}"))

    def _latency(self, r: _Round) -> None:
        """Alg. 5 lines 8-14: latency against the SLO, compute occupancy of memory nodes."""
        s, cfg = r.summary, self.config
        if s.latency is None:
            return
        observed = s.latency.value(cfg.latency_statistic)
        slo = cfg.latency_slo
        f_lower, f_upper = cfg.latency_bounds
        c_lower, c_upper = cfg.compute_bounds
        memory = s.memory
        least = memory.min_occupancy
        stat = f"{cfg.latency_statistic} latency {ms(observed)}"
        if observed > f_upper * slo:
            if least is not None and least > c_upper:
                nodes = self.active(s, MEMORY)
                ratio = observed / slo
                count = compute_target(nodes, ratio, cfg.max_latency_ratio) - nodes
                r.want_add(MEMORY, count, (
                    f"added {{n}} memory node(s): {stat} > {f_upper:g} x SLO {ms(slo)} at "
                    f"occupancy {occ(memory.avg_occupancy or least)} (least occupied node "
                    f"{occ(least)} > C_upper {c_upper:g}); ratio {ratio:.2f}"
                    + (f" capped at c = {cfg.max_latency_ratio:g}"
                       if ratio > cfg.max_latency_ratio else "")))
            elif cfg.selective_replication:
                self._replicate_hot(r, observed)
        elif observed < f_lower * slo and least is not None and least < c_lower:
            floor = max(cfg.min_memory_nodes,
                        nodes_for_storage(memory.stored_bytes, memory.node_capacity_bytes,
                                          cfg.memory_storage_bounds[1]))
            node = self._removable(memory, by_storage=False)
            if node and self.active(s, MEMORY) - 1 >= floor:
                r.want_remove(MEMORY, node, (
                    f"removed memory node {node}: {stat} < {f_lower:g} x SLO {ms(slo)} and its "
                    f"occupancy {occ(memory.node(node).occupancy if memory.node(node) else 0)} "
                    f"< C_lower {c_lower:g}"))

    def _replicate_hot(self, r: _Round, observed: float) -> None:
        """Alg. 2 lines 1-8 for every hot memory key (held during the grace period)."""
        s, cfg = r.summary, self.config
        hot = hot_threshold(s, cfg)
        candidates = [k for k in s.keys if k.accesses > hot]
        if not candidates:
            return
        if self.in_grace(r.now):
            r.notes.append(Note(f"{len(candidates)} hot keys not replicated: grace period "
                                f"until t={self.grace_until():.1f}"))
            return
        nodes = self.active(s, MEMORY)
        threads = s.memory.threads_per_node or 1
        blocked = self._blocker(r.now)
        why = (f" (mean {s.access_mean:.1f} + {cfg.hot_key_std_devs:g} x std "
               f"{s.access_std:.1f})" if hot > cfg.hot_key_min_accesses else
               " (the floor hot_key_min_accesses)")
        for key in candidates:
            if self._key_room(r) <= 0:
                break
            if blocked(key.key):
                continue
            decision = replicate(key, self.replication_of(key), observed, cfg, nodes, threads,
                                 hot, cfg.latency_statistic, why)
            if decision:
                self._set_key(r, SetReplication(key.key, decision[0], decision[1]))

    def _dereplicate(self, r: _Round) -> None:
        """Alg. 2 lines 9-10: cooled keys back to the base vector (held during grace)."""
        if self.in_grace(r.now):
            return
        cold = cold_threshold(r.summary, self.config)
        blocked = self._blocker(r.now)
        for key in r.summary.keys:
            if self._key_room(r) <= 0:
                break
            if blocked(key.key):
                continue
            decision = dereplicate(key, self.replication_of(key), self.config, cold)
            if decision:
                self._set_key(r, SetReplication(key.key, decision[0], decision[1]))

    def _over_budget(self, r: _Round) -> None:
        """A cluster over budget (lowered budget, manual additions) sheds one node."""
        s = r.summary
        layout = self.layout(s)
        why = self.budget.over(layout)
        if not why:
            return
        for tier in (MEMORY, DISK):
            t = s.tier(tier)
            node = self._removable(t, by_storage=(tier == DISK))
            if node and self.active(s, tier) - 1 >= self.config.min_nodes(tier):
                r.wants[tier] = _Want("remove", node_id=node,
                                      reason=f"removed {tier} node {node}: over budget ({why})")
                other = DISK if tier == MEMORY else MEMORY
                if other in r.wants and r.wants[other].kind == "add":
                    del r.wants[other]
                return
        r.notes.append(Note(f"over budget ({why}) but every tier is at its minimum"))

    # ---- carrying out node actions ----------------------------------------------------

    def _add_held(self, r: _Round, tier: str) -> str:
        """Why an addition to `tier` cannot happen now: "" (it can), "wait" (grace or a
        pending addition: nodes come later), or a sentence (budget, elasticity off)."""
        if not self.config.elasticity:
            return "elasticity is off"
        if self.in_grace(r.now) or self.pending_adds[tier]:
            return "wait"
        if self.budget.affordable(self.layout(r.summary), tier, 1) < 1:
            return f"the budget allows no {tier} node ({self.budget.describe(self.layout(r.summary))})"
        return ""

    def _carry_out_nodes(self, r: _Round) -> None:
        if not self.config.elasticity or not r.wants:
            return
        acted = False
        for tier in TIERS:
            want = r.wants.get(tier)
            if want is None:
                continue
            what = (f"adding {want.count} {tier} node(s)" if want.kind == "add"
                    else f"removing {tier} node {want.node_id}")
            if self.in_grace(r.now):
                r.notes.append(Note(f"held {what}: grace period after the last node change "
                                    f"until t={self.grace_until():.1f}"))
                continue
            if self.pending_adds[tier]:
                r.notes.append(Note(f"held {what}: {len(self.pending_adds[tier])} {tier} "
                                    f"node(s) requested earlier have not joined yet"))
                continue
            if want.kind == "add":
                layout = self.layout(r.summary)
                count = self.budget.affordable(layout, tier, want.count)
                if count < 1:
                    r.notes.append(Note(f"held {what}: over budget "
                                        f"({self.budget.describe(layout)})"))
                    continue
                reason = want.reason.format(n=count)
                if count < want.count:
                    reason += f"; budget allows {count} of {want.count}"
                r.nodes.append(AddNodes(tier, count, reason))
                self.pending_adds[tier].extend([r.now] * count)
            else:
                if any(t == tier for t, _ in self.removing.values()):
                    r.notes.append(Note(f"held {what}: another {tier} node is still leaving"))
                    continue
                self._reduce_before_removal(r, tier)
                r.nodes.append(RemoveNode(tier, want.node_id, want.reason))
                self.removing[want.node_id] = (tier, r.now)
            acted = True
        if acted:
            self.last_node_action = r.now

    def _reduce_before_removal(self, r: _Round, tier: str) -> None:
        """Alg. 4 reduce_replication: no key keeps more replicas in `tier` than nodes remain."""
        s = r.summary
        known: Dict[str, Replication] = dict(s.replicated)
        known.update({k.key: self.replication_of(k) for k in s.keys})
        known.update({k: v for k, (v, _) in self._replication.items()})
        after = self.active(s, tier) - 1
        reduced = reduce_for_removal(known, tier, after, self.config,
                                     disk_nodes=self.active(s, DISK),
                                     memory_nodes=self.active(s, MEMORY))
        for key, vector in sorted(reduced.items()):
            action = SetReplication(key, vector, f"reduced {key!r} to {after} {tier} "
                                                 f"replicas before a {tier} node leaves")
            self._remember(key, vector, r.now)
            r.nodes.append(action)

    # ---- helpers ----------------------------------------------------------------------

    def _removable(self, t: TierSummary, by_storage: bool) -> Optional[str]:
        """The node to remove from tier `t`: least stored (disk) or least occupied (memory)
        among reporting members not already leaving."""
        candidates = [n for n in t.nodes if n.node_id not in self.removing]
        if not candidates:
            return None
        if by_storage:
            return min(candidates, key=lambda n: (n.stored_bytes, n.occupancy, n.node_id)).node_id
        return min(candidates, key=lambda n: (n.occupancy, n.stored_bytes, n.node_id)).node_id

    def _blocker(self, now: float):
        cooldown = self.config.replication_cooldown

        def blocked(key: str) -> bool:
            tracked = self._replication.get(key)
            return tracked is not None and now - tracked[1] < cooldown
        return blocked

    def _key_room(self, r: _Round) -> int:
        return max(0, self.config.max_key_actions - len(r.keys))

    def _set_key(self, r: _Round, action: SetReplication) -> None:
        if self._key_room(r) <= 0:
            return
        r.keys.append(action)
        self._remember(action.key, action.replication, r.now)

    def _remember(self, key: str, vector: Replication, now: float) -> None:
        self._replication[key] = (vector, now)
        self._replication.move_to_end(key)
        while len(self._replication) > self.config.max_tracked_keys:
            self._replication.popitem(last=False)

