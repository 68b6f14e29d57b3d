#!/usr/bin/env sh
# Example replay job: a synthetic history rated offline, then the same history published to the
# running service, whose ratings must end equal (the embedded replay is the service's oracle).
#
#   KAFKA_BOOTSTRAP_SERVERS=localhost:9094 REDIS_URL=redis://127.0.0.1:6379/0 sh examples/replay.sh
#
# Against `docker compose up` those are the ports compose publishes on localhost.
set -eu
out=${OUT:-build/example}
mkdir -p "$out"
mmr synth --players 500 --rounds 50 --participation 0.3 --seed 11 --out "$out/rounds.jsonl"
mmr replay "$out/rounds.jsonl" --system elo-mmr --embedded --out "$out/embedded.jsonl" --top 10
mmr replay "$out/rounds.jsonl" --broker "${KAFKA_BOOTSTRAP_SERVERS:-localhost:9094}"
echo "published; once the worker has caught up: mmr export --out $out/service.jsonl"
