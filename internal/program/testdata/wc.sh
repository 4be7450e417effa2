#!/bin/sh
# Word count as a mapagg program in awk: worker run --program 'awkwordcount=/path/to/wordcount.sh'
# MAPAGG_ROLE says what to do; records and key<TAB>value lines go through stdin and stdout.
case "$MAPAGG_ROLE" in
describe) echo '{"combine":true}' ;;   # the worker may pipe map output through "combine"
map) exec awk '{ for (i = 1; i <= NF; i++) { w = $i; gsub(/\\/, "&&", w); print w "\t" 1 } }' ;;
combine|reduce)
	# Sorted by key: a key's lines are together; print its sum when the key changes.
	exec awk -F '\t' 'NR > 1 && $1 != key { print key "\t" sum; sum = 0 }
		{ key = $1; sum += $2 }
		END { if (NR > 0) print key "\t" sum }' ;;
*) echo "wordcount.sh: unknown MAPAGG_ROLE '$MAPAGG_ROLE'" >&2; exit 2 ;;
esac
