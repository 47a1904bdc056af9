"""The virtual-time loop: sleeps move its clock, however small."""

import asyncio

from lab.sim.virtual_loop import VirtualTimeLoop


def run(coroutine_function):
    loop = VirtualTimeLoop()
    try:
        return loop, loop.run_until_complete(coroutine_function(loop))
    finally:
        loop.close()


def test_a_sleep_below_the_clocks_float_step_still_moves_it():
    async def tiny_sleep(loop):
        await asyncio.sleep(5.0)
        await asyncio.sleep(1e-17)  # 5.0 + 1e-17 == 5.0 as a float
        return loop.time()

    _, after = run(tiny_sleep)
    assert after > 5.0

