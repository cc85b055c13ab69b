#!/usr/bin/env bash
# A hook that never answers in time (the test gives it a 1 second timeout).
cat > /dev/null
sleep 30
