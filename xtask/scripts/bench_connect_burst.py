#!/usr/bin/env python3
"""What a burst of clients connecting at once costs a `flue serve`: N clients open a
connection at the same moment and each asks `GET /_flue/health` once; prints how long until
every one was answered, the slowest client, and how many waited a second or more (a SYN the
listen backlog had no room for costs its client a one-second retransmit).

    python3 xtask/scripts/bench_connect_burst.py --port 3583 --clients 10000

Needs an open-file limit above N (`ulimit -n`). Standard library only.
"""

import argparse
import asyncio
import time


async def client(port, start, timings, failures):
    await start.wait()
    began = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout=120
        )
        writer.write(
            f"GET /_flue/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), timeout=120)
        writer.close()
        if not status.startswith(b"HTTP/1.1 200"):
            failures.append(status)
            return
        timings.append(time.monotonic() - began)
    except (OSError, asyncio.TimeoutError) as err:
        failures.append(repr(err))


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--clients", type=int, default=10000)
    args = parser.parse_args()
    start = asyncio.Event()
    timings, failures = [], []
    tasks = [
        asyncio.create_task(client(args.port, start, timings, failures))
        for _ in range(args.clients)
    ]
    await asyncio.sleep(0)
    began = time.monotonic()
    start.set()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - began
    timings.sort()
    slow = sum(1 for t in timings if t >= 1.0)
    print(
        f"{args.clients} clients at once: {len(timings)} answered, {len(failures)} failed, "
        f"all done in {elapsed:.2f} s; median {timings[len(timings) // 2]:.3f} s, "
        f"slowest {timings[-1]:.2f} s; {slow} waited >= 1 s"
        if timings
        else f"{args.clients} clients: none answered ({failures[:3]})"
    )


asyncio.run(main())
