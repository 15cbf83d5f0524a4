"""When the worker's kill timer is armed and cleared (executor/kill_plan.py, pure)."""
from hypothesis import given, settings, strategies as st

from executor.kill_plan import CLOCK_ROOM, AlarmPlan, KillPlan

LATE = 0.25 - CLOCK_ROOM     # how far past a call's hard limit a run arms the timer


def test_alone_a_call_arms_its_exact_hard_limit_and_clears_it_at_its_end():
    plan = KillPlan(slack=0.25, keep=10.0)
    assert plan.start(100.0, 31.0) == 31.0 and plan.armed_until == 131.0
    assert plan.end(100.001) == 0.0 and plan.armed_until is None
    assert plan.end(100.002) is None                    # already clear: no system call
    assert plan.start(101.0, 31.0) == 31.0              # the next one arms again


def test_a_run_of_equal_calls_arms_about_once_per_slack_not_twice_per_call():
    plan = KillPlan(slack=0.25, keep=10.0)
    plan.open_run()
    actions = []
    now = 0.0
    for _ in range(1000):                   # 1,000 calls of 60 us: 60 ms of calls
        actions.append(plan.start(now, 31.0))
        now += 0.00005
        actions.append(plan.end(now))
        now += 0.00001
    assert sum(a is not None for a in actions) == 1     # one arming for the whole run
    assert plan.close_run() == 0.0 and plan.armed_until is None
    assert plan.close_run() is None


def test_the_next_function_of_a_call_reading_the_clock_later_keeps_the_arming():
    """A chain's next function finds its own hard limit a few microseconds earlier than the
    first one's (its time left is read a little later): the timer stays as it is."""
    plan = KillPlan(slack=0.25, keep=10.0)
    plan.open_run()
    assert plan.start(0.0, 31.0) is not None
    assert plan.end(0.0001) is None
    assert plan.start(0.0002, 31.0 - 0.0002 - 0.00001) is None


def test_a_shorter_call_after_a_longer_one_re_arms_earlier():
    plan = KillPlan(slack=0.25, keep=10.0)
    plan.open_run()
    plan.start(0.0, 901.0)
    plan.end(0.001)                                     # 900 s left: kept armed
    assert plan.armed_until == 901.0 + LATE
    assert plan.start(0.002, 2.0) == 2.0 + LATE              # its own limit, not the other's
    assert plan.armed_until == 0.002 + 2.0 + LATE


def test_a_timer_about_to_fire_is_cleared_at_the_call_end_and_by_settle():
    plan = KillPlan(slack=0.25, keep=10.0)
    plan.open_run()
    plan.start(0.0, 1.05)
    assert plan.end(0.01) == 0.0                        # 1.3 s left < keep: cleared
    plan.start(0.02, 31.0)
    assert plan.end(0.03) is None                       # 31 s left: kept between calls
    assert plan.settle() == 0.0 and plan.armed_until is None   # the worker is to wait


def test_a_cancel_arms_the_grace_and_the_next_call_re_arms_its_own():
    plan = KillPlan(slack=0.25, keep=10.0)
    plan.open_run()
    plan.start(0.0, 31.0)
    assert plan.cancelled(1.0, 1.0) == 1.0 and plan.armed_until == 2.0
    assert plan.end(1.1) == 0.0                         # 0.9 s left: cleared
    assert plan.start(1.2, 31.0) == 31.0 + LATE


@settings(max_examples=300)
@given(st.lists(st.tuples(st.floats(0, 2), st.floats(0, 3), st.floats(0.002, 40),
                          st.booleans(), st.booleans()), min_size=1, max_size=40),
       st.booleans())
def test_every_call_is_bounded_by_its_own_hard_limit_at_most_slack_late(calls, in_run):
    """Whatever the calls (gaps, durations, limits, cancels, waits between them): while a
    function runs the timer is armed, never before its own hard limit and at most `slack`
    after it (or at a cancel's grace); between calls it is clear or `keep` away; after the
    run it is clear."""
    plan = KillPlan(slack=0.25, keep=10.0)
    if in_run:
        plan.open_run()
    armed = None          # what the timer really is (absolute), as the actions set it
    now = 0.0

    def apply(action):
        nonlocal armed
        if action is not None:
            armed = None if action == 0 else now + action
        assert armed == plan.armed_until or (armed is not None and plan.armed_until is not None
                                             and abs(armed - plan.armed_until) < 1e-6)

    for gap, duration, hard, cancel, wait in calls:
        now += gap
        if wait:
            apply(plan.settle())
            assert armed is None
        apply(plan.start(now, hard))
        own = now + hard
        assert armed is not None and own - 1e-9 <= armed <= own + plan.slack + 1e-9
        now += duration / 2
        if cancel:
            apply(plan.cancelled(now, 1.0))
            assert armed == now + 1.0
        now += duration / 2
        apply(plan.end(now))
        assert armed is None or armed - now >= plan.keep - 1e-9
        assert armed is None or in_run
    if in_run:
        apply(plan.close_run())
    assert armed is None


def test_the_alarm_alone_is_armed_to_the_limit_and_cleared_at_the_end():
    alarm = AlarmPlan()
    assert alarm.start(10.0, 2.0) == 2.0 and alarm.armed_until == 12.0
    assert alarm.end() == 0.0 and alarm.armed_until is None
    assert alarm.start(13.0, 2.0) == 2.0
    assert alarm.fired(15.0, 15.0) == 0.0                # its time is up


def test_in_a_run_the_alarm_is_left_armed_and_re_armed_when_it_fires_early():
    alarm = AlarmPlan()
    alarm.open_run()
    assert alarm.start(0.0, 2.0) == 2.0
    assert alarm.end() is None                           # left armed
    assert alarm.start(0.5, 2.0) is None                 # fires at 2.0, before 2.5
    assert alarm.fired(2.0, 2.5) == 0.5 and alarm.armed_until == 2.5   # not its limit yet
    assert alarm.fired(2.5, 2.5) == 0.0                  # now it is
    assert alarm.start(3.0, 2.0) == 2.0                  # cleared by the firing: armed again
    assert alarm.start(3.1, 0.5) == 0.5                  # a shorter limit: armed earlier
    alarm.end()
    assert alarm.fired(3.7, None) is None and alarm.armed_until is None   # between calls
    assert alarm.start(4.0, 2.0) == 2.0
    assert alarm.settle() == 0.0 and alarm.settle() is None


@settings(max_examples=300)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0.001, 3), st.floats(0.001, 3)),
                min_size=1, max_size=30), st.booleans())
def test_a_function_is_stopped_at_its_own_limit_never_before(calls, in_run):
    """Simulated kernel timer: whatever the calls' gaps, limits and run times, each function
    is stopped exactly when it reaches its own limit, and while it runs the alarm is armed no
    later than that limit."""
    from executor.kill_plan import ALARM_EARLY
    alarm = AlarmPlan()
    if in_run:
        alarm.open_run()
    timer = None          # when the simulated kernel timer fires
    now = 0.0

    def apply(action, at):
        nonlocal timer
        if action is not None:
            timer = None if action == 0 else at + action

    for gap, limit, runs in calls:
        end_gap = now + gap
        if timer is not None and timer <= end_gap:        # fires between calls
            now = timer
            timer = None
            apply(alarm.fired(now, None), now)
        now = end_gap
        own = now + limit
        apply(alarm.start(now, limit), now)
        assert timer is not None and timer <= own + 1e-9
        finish = now + runs
        stopped = None
        while timer is not None and timer <= finish:
            now = timer
            timer = None
            again = alarm.fired(now, own)
            if again == 0.0:
                stopped = now
                break
            apply(again, now)
            assert timer is not None and timer <= own + 1e-9
        if stopped is not None:
            assert stopped >= own - ALARM_EARLY and runs >= limit - ALARM_EARLY
        else:
            assert runs < limit + 1e-9
            now = finish
        apply(alarm.end(), now)
        assert in_run or timer is None
    if in_run:
        apply(alarm.settle(), now)
    assert timer is None
