#!/usr/bin/env bash
# Any event: starts a daemon in a session of its own (`setsid`, out of the hook's process group)
# that would run for 1000 s, and writes its pid to daemon.pid at the project root; with an
# argument, then waits that many seconds (so that flue can be killed while the hook runs).
cat > /dev/null
setsid -f sh -c 'echo $$ > "$CLAUDE_PROJECT_DIR/daemon.pid.tmp" && mv "$CLAUDE_PROJECT_DIR/daemon.pid.tmp" "$CLAUDE_PROJECT_DIR/daemon.pid"; exec sleep 1000' < /dev/null > /dev/null 2>&1
while [ ! -s "$CLAUDE_PROJECT_DIR/daemon.pid" ]; do sleep 0.02; done
echo $$ > "$CLAUDE_PROJECT_DIR/hook.pid"
if [ -n "${1:-}" ]; then sleep "$1"; fi
