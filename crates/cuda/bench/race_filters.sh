# The ring_check filters whose rows have failed under contention (profiles/ring-grad-race.md):
# 7, 4 and 7 rows on virtual ranks. Sourced by race_ring.sh and beside_torch.sh.
# shellcheck disable=SC2034 # used by the scripts that source this file
filters=(
  "P=3 striped | dilated_expr: rotating offsets"
  "P=4 zigzag | dilated_expr: offsets 3h - s^2"
  "P=4 zigzag | dilated_expr: rotating offsets"
)
