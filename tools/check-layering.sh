#!/usr/bin/env bash
# The layering rule, checked on the sources (the link graph enforces it for symbols):
#  - stats, topology, schedstat, sqlite, store and query include nothing from libbpf or the BPF
#    module;
#  - the pure modules (stats, metrics, topology, schedstat, pressure, charts, openmetrics, trace, base,
#    abi) include nothing from the database layers (sqlite, store, query);
#  - the database layers point one way: sqlite <- store <- query. sqlite includes neither store
#    nor query; store includes nothing from query;
#  - nothing outside modules/{sqlite,store,query} includes SQLiteCpp or sqlite3.h;
#  - record builds the store's rows (records.hpp) and links nothing else of it;
#  - rschedd records and never queries: apps/rschedd includes nothing from rsched/query, and,
#    given the built binary as $1, carries no symbol of rsched::query (spikes, blame, explain,
#    the reader).
set -u
rschedd_bin=${1:-}
cd "$(dirname "$0")/.."
bad=0
for m in stats metrics topology schedstat pressure charts openmetrics trace sqlite store query base abi; do
  [ -d "modules/$m" ] || continue
  if grep -rnE '#include [<"](bpf/|rsched/bpf/|rsched/collect/)' "modules/$m"; then
    echo "layering: modules/$m must not depend on BPF"; bad=1
  fi
done
for m in stats metrics topology schedstat pressure charts openmetrics trace base abi; do
  [ -d "modules/$m" ] || continue
  if grep -rnE '#include [<"]rsched/(sqlite|store|query)/' "modules/$m"; then
    echo "layering: modules/$m must not depend on the database layers"; bad=1
  fi
done
if grep -rnE '#include [<"]rsched/(store|query)/' modules/sqlite; then
  echo "layering: modules/sqlite is the bottom layer: it must not include store or query"; bad=1
fi
if grep -rnE '#include [<"]rsched/query/' modules/store; then
  echo "layering: modules/store must not include the query engine"; bad=1
fi
if grep -rnE '#include [<"]rsched/(sqlite|query)/|#include [<"]rsched/store/' modules/record | grep -v 'rsched/store/records\.hpp'; then
  echo "layering: modules/record may use the store's records.hpp only"; bad=1
fi
if grep -rnE '#include [<"]rsched/query/' apps/rschedd; then
  echo "layering: rschedd must not include the query engine"; bad=1
fi
if grep -rnE '#include [<"](SQLiteCpp/|sqlite3\.h)' modules apps --include='*.hpp' --include='*.cpp' --include='*.h' |
  grep -vE '^modules/(sqlite|store|query)/'; then
  echo "layering: only modules/sqlite, store and query may use SQLite directly"; bad=1
fi
if [ -n "$rschedd_bin" ]; then
  if [ ! -x "$rschedd_bin" ]; then
    echo "layering: $rschedd_bin: no such program"; bad=1
  else
    n=$(nm -C "$rschedd_bin" | grep -c 'rsched::query::')
    if [ "$n" -ne 0 ]; then
      nm -C "$rschedd_bin" | grep 'rsched::query::' | head -5
      echo "layering: rschedd carries $n symbols of rsched::query"; bad=1
    fi
  fi
fi
[ $bad -eq 0 ] && echo "layering ok"
exit $bad
