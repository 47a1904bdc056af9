"""The server's event loop, priced in the simulator: one queue of work in the order it came, free while idle; and
the in-memory connection's closing handshake."""

import asyncio

import numpy as np
import pytest

from lab.sim.memory_socket import CLOSE_TIMEOUT_S, socket_pair
from lab.sim.server_loop import LoopPrices, ServerLoop
from lab.sim.spec import parse_spec
from lab.sim.virtual_loop import VirtualTimeLoop
from liveserve.config.reader import ConfigError

PRICES = LoopPrices(message_s=0.002, output_s=0.003, vad_step_s=0.004, vad_window_s=0.001)


def run(coroutine_function):
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coroutine_function(loop))
    finally:
        loop.close()


def test_work_given_together_is_done_one_piece_after_another_in_the_order_it_came():
    async def scenario(loop):
        server, done = ServerLoop(PRICES), []
        route = server.routing(lambda kind, outputs: done.append((kind, len(outputs), loop.time())))
        route("talker", [1, 2])  # 2 x 3 ms
        server.later(0.001, lambda: done.append(("event", 1, loop.time())))
        server.later(0.0, lambda: done.append(("free", 0, loop.time())))  # done when the loop gets to it
        route("vocoder", [1])
        await asyncio.sleep(0.1)
        return done

    assert run(scenario) == [("talker", 2, pytest.approx(0.006)), ("event", 1, pytest.approx(0.007)),
                             ("free", 0, pytest.approx(0.007)), ("vocoder", 1, pytest.approx(0.010))]


def test_an_idle_loop_delays_nothing_and_free_work_takes_effect_at_once():
    async def scenario(loop):
        server, done = ServerLoop(), []
        server.later(0.0, done.append, "now")
        assert done == ["now"]  # no prices: as before the loop was priced
        await server.spend(0.0)
        priced = ServerLoop(PRICES)
        await asyncio.sleep(1.0)
        await priced.spend(0.002)  # the loop was idle: it starts now
        return loop.time()

    assert run(scenario) == pytest.approx(1.002)


def test_when_more_comes_than_the_loop_can_do_each_piece_waits_for_the_ones_before_it():
    async def scenario(loop):
        server = ServerLoop(PRICES)
        finished = []

        async def reader():
            await server.spend(0.002)
            finished.append(loop.time())

        await asyncio.gather(*(reader() for _ in range(5)))
        return finished

    assert run(scenario) == pytest.approx([0.002, 0.004, 0.006, 0.008, 0.010])


def test_the_loop_reports_the_work_it_was_given_and_how_long_work_waited_for_it():
    async def scenario(loop):
        server = ServerLoop(PRICES)
        assert server.figures() == {"busy_s": 0.0, "wait_ms": {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}}
        for _ in range(4):
            server.later(0.010, lambda: None)  # given together: each waits for those before it
        await asyncio.sleep(1.0)
        server.later(0.010, lambda: None)  # the loop is idle again: no wait
        return server.figures()

    figures = run(scenario)
    assert figures["busy_s"] == pytest.approx(0.050)
    assert figures["wait_ms"]["max"] == pytest.approx(30.0) and figures["wait_ms"]["p50"] == pytest.approx(10.0)


def test_a_vad_batch_scores_on_its_thread_then_waits_for_the_loop():
    async def scenario(loop):
        server = ServerLoop(PRICES)
        streams = [(None, np.zeros((3, 512))), (None, np.zeros((1, 512)))]
        server.later(0.050, lambda: None)  # the loop is busy for 50 ms
        result = await server.score_vad(lambda given: [len(w) for _, w in given], streams)
        return result, loop.time()

    result, at = run(scenario)
    assert result == [3, 1]
    assert at == pytest.approx(0.050)  # scored in 3 x 4 + 4 x 1 = 16 ms meanwhile, back when the loop is free


def test_a_message_reaches_the_server_once_read_and_an_event_the_client_once_sent():
    async def scenario(loop):
        server = ServerLoop(PRICES)
        server_end, client_end = socket_pair(server)
        await client_end.send("append")
        message = await server_end.receive()
        read_at = loop.time()
        server.routing(lambda kind, outputs: None)("vocoder", [1])  # 3 ms of routing before the event
        await server_end.send_text("delta")
        await server_end.close()
        received = [text async for text in client_end]
        return message["text"], read_at, received, loop.time()

    text, read_at, received, closed_at = run(scenario)
    assert (text, received) == ("append", ["delta"])
    assert read_at == pytest.approx(0.002) and closed_at == pytest.approx(0.005)


def spec_with(server: dict) -> dict:
    thinker = {"model": {"num_layers": 2, "hidden": 64, "num_heads": 2, "num_kv_heads": 2, "head_dim": 32,
                         "intermediate": 128, "vocab": 100}}
    return {"calibration": "none", "device": {"type": "H200"}, "stages": {"thinker": thinker}, "server": server}


def test_a_spec_prices_the_server_loop_in_ms_and_names_a_bad_field():
    loaded = parse_spec(spec_with({"message_ms": 0.2, "output_ms": 1.5, "vad_window_ms": 0.08}), "loop", "loop.yaml")
    assert loaded.server == LoopPrices(message_s=pytest.approx(2e-4), output_s=pytest.approx(1.5e-3),
                                       vad_window_s=pytest.approx(8e-5))
    assert parse_spec({k: v for k, v in spec_with({}).items() if k != "server"}, "none", "none.yaml").server \
        == LoopPrices()
    with pytest.raises(ConfigError, match=r"loop\.yaml\.server\.output_ms: must be >= 0"):
        parse_spec(spec_with({"output_ms": -1}), "loop", "loop.yaml")
    with pytest.raises(ConfigError, match=r"loop\.yaml\.server.*message_mss"):
        parse_spec(spec_with({"message_mss": 1}), "loop", "loop.yaml")


def test_a_client_that_closes_waits_for_the_server_to_let_the_session_go():
    async def scenario(loop):
        server_end, client_end = socket_pair(ServerLoop(PRICES))

        async def serve():
            await asyncio.sleep(0.5)  # the server is busy before it reads the close
            await server_end.send_text("late event")
            assert (await server_end.receive())["type"] == "websocket.disconnect"
            await server_end.close()

        serving = asyncio.ensure_future(serve())
        await client_end.close()
        closed_at = loop.time()
        await serving
        return closed_at

    assert run(scenario) == pytest.approx(0.5)


def test_a_server_that_never_closes_lets_the_client_go_after_the_close_timeout():
    async def scenario(loop):
        _, client_end = socket_pair(ServerLoop())
        await client_end.close()
        return loop.time(), client_end.is_closed

    assert run(scenario) == (pytest.approx(CLOSE_TIMEOUT_S), True)
