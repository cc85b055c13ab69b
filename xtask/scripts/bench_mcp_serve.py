#!/usr/bin/env python3
"""What a flood of MCP requests costs `flue mcp serve`: its resident memory before and after.

usage: bench_mcp_serve.py FLUE_BINARY http N [flue mcp serve flags...]
       bench_mcp_serve.py FLUE_BINARY stdio N [flue mcp serve flags...]

`http`: starts FLUE_BINARY mcp serve --http on a copy of
crates/flue-cli/tests/fixtures/serve-workspace, sends N `initialize` requests (each opening an
MCP session, never closed), on 8 keep-alive connections, and counts the answers by status.
`stdio`: starts FLUE_BINARY mcp serve over stdio, completes the handshake, then writes N `ping`
requests and never reads what the server writes back; the writes stop when the server stops
reading (the pipe fills) or after 60 s.

Either way it prints one JSON line: the resident size (VmRSS) at rest and after the flood, and
the peak (VmHWM), in MiB; for stdio, how many pings the server took before it stopped reading.
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, '..', '..', 'crates', 'flue-cli', 'tests', 'fixtures', 'serve-workspace')
INITIALIZE = {
    'jsonrpc': '2.0', 'id': 1, 'method': 'initialize',
    'params': {'protocolVersion': '2025-06-18', 'capabilities': {},
               'clientInfo': {'name': 'flood', 'version': '1'}},
}


def status_mib(pid, field):
    with open(f'/proc/{pid}/status') as status:
        for line in status:
            if line.startswith(field + ':'):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def workspace():
    root = tempfile.mkdtemp(prefix='flue-mcp-flood-')
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True)
    return root


def flood_http(flue, count, extra):
    root = workspace()
    server = subprocess.Popen(
        [flue, 'mcp', 'serve', '--root', root, '--http', '--port', '0', *extra],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in server.stderr:
            found = re.search(r'http://127\.0\.0\.1:(\d+)/mcp', line)
            if found:
                port = int(found.group(1))
                break
        if port is None:
            raise SystemExit('the server never said where it listens')
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        time.sleep(1)
        rest = status_mib(server.pid, 'VmRSS')
        statuses = {}
        lock = threading.Lock()
        body = json.dumps(INITIALIZE)
        headers = {'Content-Type': 'application/json',
                   'Accept': 'application/json, text/event-stream'}
        next_index = [0]

        def worker():
            conn = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
            while True:
                with lock:
                    if next_index[0] >= count:
                        break
                    next_index[0] += 1
                try:
                    conn.request('POST', '/mcp', body, headers)
                    response = conn.getresponse()
                    response.read()
                    code = response.status
                    if response.getheader('Connection', '').lower() == 'close':
                        conn.close()
                        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
                except (OSError, http.client.HTTPException):
                    code = 'error'
                    conn.close()
                    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
                with lock:
                    statuses[str(code)] = statuses.get(str(code), 0) + 1
            conn.close()

        started = time.time()
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = round(time.time() - started, 1)
        after = status_mib(server.pid, 'VmRSS')
        peak = status_mib(server.pid, 'VmHWM')
        print(json.dumps({'mode': 'http', 'requests': count, 'statuses': statuses,
                          'seconds': seconds, 'rest_mib': rest, 'after_mib': after,
                          'peak_mib': peak}))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(root, ignore_errors=True)


def flood_stdio(flue, count, extra):
    root = workspace()
    server = subprocess.Popen(
        [flue, 'mcp', 'serve', '--root', root, *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        def send(message):
            server.stdin.write((json.dumps(message) + '\n').encode())
            server.stdin.flush()

        send(INITIALIZE)
        server.stdout.readline()
        send({'jsonrpc': '2.0', 'method': 'notifications/initialized'})
        time.sleep(1)
        rest = status_mib(server.pid, 'VmRSS')
        written = [0]

        def writer():
            try:
                for index in range(count):
                    send({'jsonrpc': '2.0', 'id': index + 2, 'method': 'ping'})
                    written[0] = index + 1
            except OSError:
                pass

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        # The writes stop for good once the server stops reading: wait until the count has not
        # moved for 5 s, or all were written, or 60 s passed.
        deadline = time.time() + 60
        last, still_since = -1, time.time()
        while thread.is_alive() and time.time() < deadline:
            time.sleep(0.5)
            if written[0] != last:
                last, still_since = written[0], time.time()
            elif time.time() - still_since > 5:
                break
        after = status_mib(server.pid, 'VmRSS')
        peak = status_mib(server.pid, 'VmHWM')
        print(json.dumps({'mode': 'stdio', 'pings': count, 'written': written[0],
                          'stopped_reading': thread.is_alive(), 'rest_mib': rest,
                          'after_mib': after, 'peak_mib': peak}))
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(root, ignore_errors=True)


def main():
    flue, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    extra = sys.argv[4:]
    if mode == 'http':
        flood_http(flue, count, extra)
    elif mode == 'stdio':
        flood_stdio(flue, count, extra)
    else:
        raise SystemExit(f'unknown mode {mode}: http or stdio')


if __name__ == '__main__':
    main()
