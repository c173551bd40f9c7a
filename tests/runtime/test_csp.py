"""pw.csp: channels, token queues, virtual threads, deadlock detection, both clocks."""

from __future__ import annotations

import pytest
import trio

import ptowsp as pw
from ptowsp import csp


def double_buffer(tiles: int, load_s: float, compute_s: float, buffers: int):
    """load -> compute over a channel, with `buffers` credits on the WAR queue."""
    channel = csp.Channel(buffers, name="tiles")
    free = csp.DepQueue("free", credits=buffers)

    async def load():
        for t in range(tiles):
            await free.pop_dep()  # WAR: a buffer must be free before it is overwritten
            with csp.span("load"):
                await trio.sleep(load_s)
            await channel.send(t)
        channel.close()

    async def compute():
        seen = []
        async for t in channel:
            with csp.span("compute"):
                await trio.sleep(compute_s)
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
            log.append(("sent", k, trio.current_time()))
        channel.close()

    async def consumer():
        await trio.sleep(10)
        got = [x async for x in channel]
        with pytest.raises(trio.EndOfChannel):
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
        await trio.sleep(5)
        await channel.send("x")

    async def fast():
        return await channel.receive()

    assert csp.run([slow, fast], clock="device") == [None, "x"]


def test_an_error_cancels_every_thread_and_propagates():
    cancelled = []

    async def fails():
        await trio.sleep(1)
        raise ValueError("boom")

    async def long():
        try:
            await trio.sleep(100)
        except trio.Cancelled:
            cancelled.append(True)
            raise

    with pytest.raises(ValueError, match="boom"):
        csp.run([fails, long], clock="device")
    assert cancelled == [True]


def test_timeout():
    async def forever():
        await trio.sleep(1000)

    with pytest.raises(pw.RunTimeout, match="within 5 s of its device clock; still running: 'forever'"):
        csp.run([forever], clock="device", timeout=5)


def test_bad_arguments_are_typed():
    with pytest.raises(pw.PtowspError, match="capacity must be an integer >= 1"):
        csp.Channel(0, "x")
    with pytest.raises(pw.PtowspError, match="credits must be an integer >= 0"):
        csp.DepQueue("q", credits=-1)
    with pytest.raises(pw.PtowspError, match="clock must be 'real' or 'device'"):
        csp.run([], clock="wall")
