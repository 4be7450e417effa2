#!/bin/sh
# A word count in the streaming contract: awk for map, combine and reduce.
case "$MAPAGG_ROLE" in
describe) echo '{"combine":true}' ;;
map) exec awk '{ for (i = 1; i <= NF; i++) print $i "\t1" }' ;;
combine|reduce) exec awk -F '\t' '
	NR > 1 && $1 != k { print k "\t" n; n = 0 }
	{ k = $1; n += $2 }
	END { if (NR > 0) print k "\t" n }' ;;
*) echo "unknown role $MAPAGG_ROLE" >&2; exit 2 ;;
esac
