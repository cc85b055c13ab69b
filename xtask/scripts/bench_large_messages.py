#!/usr/bin/env python3
"""What large messages sent at once cost a `flue serve`: its peak memory and its store's growth.

usage: bench_large_messages.py FLUE_BINARY MESSAGES MIB [flue serve flags...]

Starts FLUE_BINARY serve on a copy of crates/flue-cli/tests/fixtures/serve-workspace with an
agent `large` added (the scripted model with a context window large enough for the message, so
that each message runs a model turn and completes), measures its resident size at rest, sends MESSAGES messages of
MIB MiB of text at once (each to a conversation of its own; a 503 `server_busy` is sent again),
follows each conversation's stream (long-poll) until its message settled, then prints one JSON
line: the answers, how many 503s, the resident size at rest and the peak (VmHWM), the growth of
the SQLite store with its write-ahead log, and its size after a checkpoint (used pages, and the
free ones the next writes reuse). With WRAP set (e.g. WRAP="heaptrack -o out"), the server runs
under that command; the memory figures are then the wrapper's, not the server's.
"""
import http.client
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, '..', '..', 'crates', 'flue-cli', 'tests', 'fixtures', 'serve-workspace')


def main():
    flue, count, size_mib = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    extra = sys.argv[4:]
    root = tempfile.mkdtemp(prefix='flue-large-')
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True)
    with open(os.path.join(root, 'agents', 'large.md'), 'w') as agent:
        agent.write('---\ndescription: Reads long messages\n'
                    'model: scripted/scripts/large.json\n---\nYou read everything.\n')
    with open(os.path.join(root, 'scripts', 'large.json'), 'w') as script:
        json.dump({'model': {'context_window': 100_000_000},
                   'rules': [{'reply': {'text': 'Read it all.'}}]}, script)
    wrap = os.environ.get('WRAP', '').split()
    server = subprocess.Popen([*wrap, flue, 'serve', '--root', root, '--port', '0', *extra],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env={**os.environ, 'FLUE_LOG': 'warn'},
                              text=True)
    try:
        run(server, root, count, size_mib, extra, bool(wrap))
    finally:
        stop(server, bool(wrap))
        shutil.rmtree(root, ignore_errors=True)


def run(server, root, count, size_mib, extra, wrapped):
    addr = None
    for line in server.stderr:
        if line.startswith('flue serve: listening on http://'):
            addr = line.strip().split('http://', 1)[1]
            break
    if addr is None:
        sys.exit('flue serve did not start')
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    host, port = addr.rsplit(':', 1)
    port = int(port)
    time.sleep(0.5)
    rest = status(server.pid, 'VmRSS:')
    store_before = store_bytes(root)
    line = 'x' * 63 + '\n'
    text = line * int(size_mib * 1024 * 1024 / len(line))
    payload = json.dumps({'kind': 'user', 'body': text}).encode()
    results = [None] * count
    busy = [0] * count

    def send(idx):
        while True:
            connection = http.client.HTTPConnection(host, port, timeout=600)
            try:
                connection.request('POST', f'/agents/large/m-{idx}', body=payload,
                                   headers={'content-type': 'application/json'})
            except OSError:
                pass  # answered before the body was read: the answer is read below
            try:
                response = connection.getresponse()
                data = response.read()
            except OSError:
                busy[idx] += 1
                time.sleep(0.5)
                continue
            if response.status == 503:
                busy[idx] += 1
                continue
            results[idx] = (response.status, json.loads(data) if data else None)
            return

    started = time.time()
    senders = [threading.Thread(target=send, args=(idx,)) for idx in range(count)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    outcomes = [wait_settled(host, port, f'/agents/large/m-{idx}', receipt['offset'])
                if code == 202 else None
                for idx, (code, receipt) in enumerate(results)]
    seconds = time.time() - started
    peak = status(server.pid, 'VmHWM:')
    store_with_log = store_bytes(root) - store_before
    stop(server, wrapped)
    database = sqlite3.connect(os.path.join(root, '.flue', 'flue.db'))
    database.execute('PRAGMA wal_checkpoint(TRUNCATE)')
    pages, free, page_size = (database.execute(f'PRAGMA {name}').fetchone()[0]
                              for name in ('page_count', 'freelist_count', 'page_size'))
    database.close()
    mib = 1024 * 1024
    print(json.dumps({
        'messages': count, 'mib': size_mib, 'flags': extra,
        'answers': [code for code, _ in results], 'busy_answers': sum(busy),
        'outcomes': outcomes,
        'rest_mib': round(rest / 1024), 'peak_mib': round(peak / 1024),
        'store_growth_with_log_mib': round(store_with_log / mib),
        'store_used_mib': round((pages - free) * page_size / mib),
        'store_free_mib': round(free * page_size / mib),
        'seconds': round(seconds, 1),
    }))


def wait_settled(host, port, path, offset):
    """Follows the stream until the settlement; its outcome."""
    connection = http.client.HTTPConnection(host, port, timeout=600)
    while True:
        connection.request('GET', f'{path}?view=updates&offset={offset}&live=long-poll')
        response = connection.getresponse()
        body = response.read().decode()
        if '"submission-settled"' in body:
            for outcome in ('completed', 'failed', 'aborted'):
                if f'"outcome":"{outcome}"' in body:
                    return outcome
            return 'settled'
        offset = response.getheader('stream-next-offset')


def status(pid, field):
    try:
        with open(f'/proc/{pid}/status') as lines:
            for line in lines:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def store_bytes(root):
    total = 0
    for name in ('flue.db', 'flue.db-wal'):
        path = os.path.join(root, '.flue', name)
        if os.path.exists(path):
            total += os.path.getsize(path)
    return total


def descendants(pid):
    try:
        with open(f'/proc/{pid}/task/{pid}/children') as children:
            kids = [int(kid) for kid in children.read().split()]
    except OSError:
        return []
    return kids + [grandchild for kid in kids for grandchild in descendants(kid)]


def command_name(pid):
    try:
        with open(f'/proc/{pid}/comm') as comm:
            return comm.read()
    except OSError:
        return ''


def stop(server, wrapped):
    if server.poll() is not None:
        return
    # Under a wrapper, stop the server itself so that the wrapper can finish its output.
    targets = [pid for pid in descendants(server.pid) if 'flue' in command_name(pid)] \
        if wrapped else [server.pid]
    for pid in targets:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    if not wrapped:
        server.terminate()
    server.wait()


if __name__ == '__main__':
    main()
