#!/usr/bin/env bash
# The trained drafters (examples/weights, tools/train) through the example engine, as CI runs them:
# each example loads its shipped checkpoint (layout checked by name, shape and dtype), generates the
# prompts of tests/data/drafters/prompts.txt greedily, and must (1) give vanilla greedy decoding's
# output token for token and (2) accept at least the floor in tests/data/drafters/tau_floor.txt: 0.9 of
# the tokens per forward measured when the weights were shipped, rounded down. Floors, not exact
# values: another instruction set rounds the draft logits differently and may flip a near-tie; broken
# wiring or weights give a tau near 1.
#   scripts/check_drafters.sh BUILD_DIR
set -euo pipefail
build="${1:?usage: scripts/check_drafters.sh BUILD_DIR}"
model="${SPECDEC_MODEL:-$(scripts/fetch_model.sh)}"
status=0
while read -r drafter floor; do
  [ -z "$drafter" ] || [ "${drafter:0:1}" = "#" ] && continue
  line=$(OMP_NUM_THREADS=2 "$build/examples/specdec_$drafter" --model "$model" --prompts tests/data/drafters/prompts.txt \
    --max-new 32 | grep '^RESULT') || { echo "FAIL $drafter: the example failed"; status=1; continue; }
  tau=$(sed -E 's/.* tau=([0-9.]+).*/\1/' <<<"$line")
  identical=$(sed -E 's/.* identical=([a-z]+).*/\1/' <<<"$line")
  if [ "$identical" = yes ] && awk -v t="$tau" -v f="$floor" 'BEGIN { exit !(t >= f) }'; then
    echo "ok   $drafter: tau $tau >= $floor, greedy identical to vanilla"
  else
    echo "FAIL $drafter: tau $tau (floor $floor), identical=$identical"
    status=1
  fi
done < tests/data/drafters/tau_floor.txt
exit $status
