#!/usr/bin/env bash
# The layering rule, checked on the sources (the link graph enforces it for symbols):
#  - stats, topology, schedstat and store include nothing from libbpf or the BPF module;
#  - the pure modules (stats, metrics, topology, schedstat, pressure, charts, openmetrics, base,
#    abi) include
#    nothing from the store either;
#  - nothing outside modules/store includes SQLiteCpp or sqlite3.h.
set -u
cd "$(dirname "$0")/.."
bad=0
for m in stats metrics topology schedstat pressure charts openmetrics store base abi; do
  [ -d "modules/$m" ] || continue
  if grep -rnE '#include [<"](bpf/|rsched/bpf/|rsched/collect/)' "modules/$m"; then
    echo "layering: modules/$m must not depend on BPF"; bad=1
  fi
done
for m in stats metrics topology schedstat pressure charts openmetrics base abi; do
  [ -d "modules/$m" ] || continue
  if grep -rnE '#include [<"]rsched/store/' "modules/$m"; then
    echo "layering: modules/$m must not depend on the store"; bad=1
  fi
done
if grep -rnE '#include [<"](SQLiteCpp/|sqlite3\.h)' modules apps --include='*.hpp' --include='*.cpp' --include='*.h' |
  grep -v '^modules/store/'; then
  echo "layering: only modules/store may use SQLite directly"; bad=1
fi
[ $bad -eq 0 ] && echo "layering ok"
exit $bad
