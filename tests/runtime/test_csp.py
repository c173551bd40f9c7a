"""pw.csp: channels, token queues, virtual threads, deadlock detection, both clocks."""

from __future__ import annotations

import os
import threading

import pytest
import trio

import ptowsp as pw
from ptowsp import csp
from ptowsp.runtime.engines import current


def double_buffer(tiles: int, load_s: float, compute_s: float, buffers: int):
    """load -> compute over a channel, with `buffers` credits on the WAR queue."""
    channel = csp.Channel(buffers, name="tiles")
    free = csp.DepQueue("free", credits=buffers)

    async def load():
        for t in range(tiles):
            await free.pop_dep()  # WAR: a buffer must be free before it is overwritten
            with csp.span("load"):
                await csp.sleep(load_s)
            await channel.send(t)
        channel.close()

    async def compute():
        seen = []
        async for t in channel:
            with csp.span("compute"):
                await csp.sleep(compute_s)
            free.push_dep()
            seen.append(t)
        return seen

    return channel, free, [csp.process(load, name="load"), csp.process(compute, name="compute")]


def test_double_buffering_overlaps_load_and_compute_on_the_device_clock():
    channel, free, procs = double_buffer(tiles=6, load_s=1.0, compute_s=2.0, buffers=2)
    results = csp.run(procs, clock="device")
    assert results == [None, [0, 1, 2, 3, 4, 5]]
    assert results.trace.makespan == pytest.approx(1.0 + 6 * 2.0)  # loads hide behind computes
    stats = free.statistics()
    assert (stats.pushes, stats.pops, stats.tokens, stats.credits) == (6, 6, 2, 2)
    assert channel.statistics().sent == channel.statistics().received == 6
    names = [e.name for e in results.trace.events]
    assert names.count("load") == names.count("compute") == 6


def test_one_buffer_serialises_load_and_compute():
    # with one buffer the next load waits for the previous compute: 6 loads + 6 computes in series
    _, _, procs = double_buffer(tiles=6, load_s=1.0, compute_s=2.0, buffers=1)
    assert csp.run(procs, clock="device").trace.makespan == pytest.approx(18.0)


def test_channel_backpressure_and_close():
    channel = csp.Channel(2, name="c")
    log = []

    async def producer():
        for k in range(5):
            await channel.send(k)
            log.append(("sent", k, csp.now()))
        channel.close()

    async def consumer():
        await csp.sleep(10)
        got = [x async for x in channel]
        with pytest.raises(csp.EndOfChannel):
            await channel.receive()
        return got

    results = csp.run([producer, consumer], clock="device")
    assert results[1] == [0, 1, 2, 3, 4]
    assert [t for _, k, t in log if k < 2] == [0, 0]  # two fit before anyone receives
    assert all(t == 10 for _, k, t in log if k >= 2)  # the rest wait for the consumer
    assert channel.statistics().max_buffered == 2
    waits = [w for w in results.trace.waits if w.kind == "channel" and w.on == "c"]
    assert waits and waits[0].end - waits[0].start == pytest.approx(10)

    async def late():
        await channel.send(9)

    with pytest.raises(trio.ClosedResourceError, match="'c' is closed"):
        csp.run([late])


def test_deadlock_lists_every_blocked_thread_and_what_it_waits_on():
    a, b = csp.Channel(1, "a"), csp.Channel(1, "b")
    token = csp.DepQueue("token")

    async def left():
        await a.receive()

    async def right():
        await b.receive()

    async def third():
        await token.pop_dep()

    with pytest.raises(pw.DeadlockError) as info:
        csp.run([csp.process(left, name="left"), csp.process(right, name="right"), third], clock="device")
    message = str(info.value)
    assert "'left' waits to receive from channel 'a'" in message
    assert "'right' waits to receive from channel 'b'" in message
    assert "'third' waits to pop a token from 'token'" in message
    assert len(info.value.blocked) == 3


def test_a_thread_that_exits_leaving_its_peer_blocked_is_a_deadlock():
    channel = csp.Channel(1, "never")

    async def quits():
        return 1

    async def waits():
        await channel.receive()

    with pytest.raises(pw.DeadlockError, match="'waits' waits to receive from channel 'never'"):
        csp.run([quits, waits])


def test_sleeping_threads_are_not_a_deadlock():
    channel = csp.Channel(1, "late")

    async def slow():
        await csp.sleep(5)
        await channel.send("x")

    async def fast():
        return await channel.receive()

    assert csp.run([slow, fast], clock="device") == [None, "x"]


def test_an_error_cancels_every_thread_and_propagates():
    cancelled = []

    async def fails():
        await csp.sleep(1)
        raise ValueError("boom")

    async def long():
        try:
            await csp.sleep(100)
        except csp.Cancelled:
            cancelled.append(True)
            raise

    with pytest.raises(ValueError, match="boom"):
        csp.run([fails, long], clock="device")
    assert cancelled == [True]


def test_timeout():
    async def forever():
        await csp.sleep(1000)

    with pytest.raises(pw.RunTimeout, match="within 5 s of its device clock; still running: 'forever'"):
        csp.run([forever], clock="device", timeout=5)


def test_bad_arguments_are_typed():
    with pytest.raises(pw.PtowspError, match="capacity must be an integer >= 0"):
        csp.Channel(-1, "x")
    with pytest.raises(pw.PtowspError, match="credits must be an integer >= 0"):
        csp.DepQueue("q", credits=-1)
    with pytest.raises(pw.PtowspError, match="clock must be 'real' or 'device'"):
        csp.run([], clock="wall")


# -- rendezvous, close and cancellation on both clocks -----------------------------------------------
CLOCKS = ["real", "device"]


async def until(condition, limit: float = 10.0) -> None:
    """Wait (letting the other processes run) until `condition()` holds: a process that must act only
    once its peers are parked waits for that, not for a sleep it hopes is long enough.  It looks every
    millisecond of the run's clock, for at most `limit` seconds of it (then the test fails)."""
    for _ in range(round(limit / 1e-3)):
        if condition():
            return
        await csp.sleep(1e-3)
    raise AssertionError(f"{condition} did not hold within {limit} s")


@pytest.mark.parametrize("clock", CLOCKS)
def test_a_rendezvous_send_waits_for_its_receiver(clock):
    channel = csp.Channel(0, name="rv")
    log = []

    async def sender():
        for k in range(3):
            await channel.send(k)
            log.append(("sent", k, csp.now()))
        channel.close()

    async def receiver():
        got = []
        await csp.sleep(0.02)
        async for k in channel:
            got.append(k)
            await csp.sleep(0.01)
        return got

    results = csp.run([sender, receiver], clock=clock)
    assert results[1] == [0, 1, 2]
    sent_at = [t for _, _, t in log]
    assert sent_at[0] >= 0.02 * 0.999  # nothing is buffered: the first send completes when the receiver takes it
    assert sent_at[1] >= 0.03 * 0.999 and sent_at[2] >= 0.04 * 0.999
    stats = channel.statistics()
    assert (stats.capacity, stats.max_buffered, stats.sent, stats.received) == (0, 0, 3, 3)
    if clock == "device":
        assert sent_at == pytest.approx([0.02, 0.03, 0.04])


@pytest.mark.parametrize("clock", CLOCKS)
def test_close_ends_waiting_receivers_and_fails_waiting_senders(clock):
    empty, full = csp.Channel(1, "empty"), csp.Channel(0, "full")
    outcome = {}

    async def receives():
        try:
            await empty.receive()
        except csp.EndOfChannel:
            outcome["receiver"] = "end"

    async def sends():
        try:
            await full.send("x")
        except csp.ChannelClosed as e:
            outcome["sender"] = str(e)

    async def closer():
        await until(lambda: empty.statistics().waiting_receivers == full.statistics().waiting_senders == 1)
        empty.close()
        full.close()

    csp.run([receives, sends, closer], clock=clock)
    assert outcome == {"receiver": "end", "sender": "channel 'full' was closed while a send waited"}
    assert isinstance(csp.ChannelClosed("x"), trio.ClosedResourceError)  # what earlier versions raised


@pytest.mark.parametrize("clock", CLOCKS)
def test_an_error_cancels_a_blocked_peer_and_runs_its_cleanup(clock):
    channel, cleaned = csp.Channel(0, "never"), []

    async def fails():
        await csp.sleep(0.01)
        raise KeyError("boom")

    async def blocked():
        try:
            await channel.receive()
        finally:
            cleaned.append(True)

    with pytest.raises(KeyError, match="boom"):
        csp.run([fails, blocked], clock=clock)
    assert cleaned == [True]
    assert channel.statistics().waiting_receivers == 0  # the cancelled receiver left the channel


@pytest.mark.parametrize("clock", CLOCKS)
def test_a_parked_process_discarded_ends_where_it_waits_without_running_again(clock):
    """Engine.discard (the executor ends idle workers this way when the run is over): the waiter's
    cleanup runs on the discarding thread, it leaves the queue it waited on, and the run ends with
    no deadlock; a process that is not parked is left alone."""
    tokens, seen = csp.DepQueue("never"), {}

    async def waiter():
        seen["waiter"] = current()
        try:
            await tokens.pop_dep()
            seen["woken"] = True  # never: discarding does not resume it
        finally:
            seen["cleanup on"] = threading.current_thread()

    async def discarder():
        await until(lambda: tokens.statistics().waiting == 1)
        engine, me = current()
        assert not engine.discard(me)  # running: not parked
        seen["discarded"] = engine.discard(seen["waiter"][1])
        seen["discarder on"] = threading.current_thread()

    results = csp.run([waiter, discarder], clock=clock)
    assert results == [None, None] and seen["discarded"] and "woken" not in seen
    assert seen["cleanup on"] is seen["discarder on"]
    assert tokens.statistics().waiting == 0


@pytest.mark.parametrize("clock", CLOCKS)
def test_deadlock_on_a_rendezvous_names_both_sides(clock):
    a, b = csp.Channel(0, "a"), csp.Channel(0, "b")

    async def left():
        await a.send(1)

    async def right():
        await b.send(1)

    with pytest.raises(pw.DeadlockError) as info:
        csp.run([csp.process(left, name="left"), csp.process(right, name="right")], clock=clock)
    assert "'left' waits to send on channel 'a' (no receiver waiting)" in str(info.value)
    assert "'right' waits to send on channel 'b' (no receiver waiting)" in str(info.value)


def test_a_ping_pong_on_the_real_clock_crosses_threads_and_keeps_order():
    ping, pong = csp.Channel(0, "ping"), csp.Channel(0, "pong")

    async def player():
        for k in range(200):
            await ping.send(k)
            assert await pong.receive() == k + 1
        ping.close()

    async def echo():
        async for k in ping:
            await pong.send(k + 1)
        return "done"

    assert csp.run([player, echo]) == [None, "done"]


def test_the_device_clock_repeats_its_order_exactly():
    def once():
        order = []
        channel = csp.Channel(2, "c")

        async def worker(k):
            for step in range(5):
                await csp.sleep(1.0)  # every worker wakes at the same instants: ties everywhere
                await channel.send((k, step))

        async def sink():
            for _ in range(20):
                order.append(await channel.receive())

        csp.run([csp.process(worker, k, name=f"w{k}") for k in range(4)] + [sink], clock="device")
        return order

    first = once()
    assert first == once()
    assert first[:4] == [(0, 0), (1, 0), (2, 0), (3, 0)]  # ties run in the order the sleeps began


def test_sleep_takes_a_number_of_seconds():
    async def bad():
        await csp.sleep(-1)

    with pytest.raises(pw.InputError, match="pw.csp.sleep takes a number of seconds >= 0, got -1"):
        csp.run([bad], clock="device")


def test_a_pinned_process_runs_on_its_thread_and_others_anywhere():
    import threading

    seen = {}

    async def where(name):
        seen[name] = threading.get_ident()
        await csp.sleep(0)
        assert threading.get_ident() == seen[name]  # a pinned process stays on its thread

    caller = threading.get_ident()
    csp.run([csp.Process(where, ("zero",), pin=0), csp.Process(where, ("one",), pin=1)])
    assert seen["zero"] == caller
    if len(os.sched_getaffinity(0)) > 1:  # one thread per CPU: with one CPU both pins share it
        assert seen["one"] != caller


def test_hand_overs_are_flows_in_the_trace_and_arrows_in_chrome_json(tmp_path):
    import json

    channel, tokens = csp.Channel(0, "rv"), csp.DepQueue("credits")

    async def sender():
        for k in range(3):
            await csp.sleep(1.0)
            await channel.send(k)
        await csp.sleep(1.0)
        tokens.push_dep()

    async def receiver():
        got = [await channel.receive() for _ in range(3)]
        await tokens.pop_dep()
        return got

    trace = csp.run([csp.process(sender, name="s"), csp.process(receiver, name="r")], clock="device").trace
    assert [(f.source, f.target, f.sent, f.kind, f.on) for f in trace.flows] == \
        [(0, 1, 1.0, "channel", "rv"), (0, 1, 2.0, "channel", "rv"), (0, 1, 3.0, "channel", "rv"),
         (0, 1, 4.0, "token", "credits")]
    events = json.loads(trace.to_chrome(tmp_path / "t.json").read_text())["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == 4
    assert all(starts[k]["tid"] == 0 and ends[k]["tid"] == 1 for k in starts)


def test_non_blocking_receive_and_many_tokens_at_once():
    channel, tokens = csp.Channel(2, "c"), csp.DepQueue("t")
    got = []

    async def worker():
        with pytest.raises(csp.WouldBlock, match="channel 'c' is empty"):
            channel.receive_nowait()
        await channel.send(1)
        got.append(channel.receive_nowait())
        tokens.push_dep(3)  # three tokens in one push
        for _ in range(3):
            await tokens.pop_dep()
        with pytest.raises(csp.WouldBlock, match="'t' popped while empty"):
            tokens.pop_dep_nowait()
        channel.close()
        with pytest.raises(csp.EndOfChannel):
            channel.receive_nowait()

    csp.run([worker], clock="device")
    assert got == [1]
    assert (tokens.statistics().pushes, tokens.statistics().pops, tokens.statistics().max_tokens) == (3, 3, 3)
