#!/bin/bash
# GetInitialResultSet answer time: release searchlightd + searchlight-desktop on a private session bus,
# gdbus call as the client. Usage: measure.sh DIR LABEL
set -u
DIR=$1; LABEL=$2
export DBUS_SESSION_BUS_ADDRESS=unix:path=$DIR/bus
G="gdbus call --session --dest org.searchlight.Searchlight.SearchProvider --object-path /org/searchlight/Searchlight/SearchProvider --method org.gnome.Shell.SearchProvider2.GetInitialResultSet"
QUERIES=(lib python gnome "network manager" json parser "x11" "font" "perl module" "rust" "kernel" "game" "editor" "sql" "http server"
  "lib python" "audio" "video player" "documentation" "devel" "ssh" "image" "pdf" "web browser" "compiler" "xml" "gtk" "qt" "java" "haskell"
  "nat" "pyt" "gno" "netw" "dat" "mus" "pro" "ser" "tex" "zz")
: > $DIR/wall-$LABEL.txt
for round in 1 2; do
  for q in "${QUERIES[@]}"; do
    terms=$(python3 -c "import sys; print('[' + ', '.join(repr(w) for w in sys.argv[1].split()) + ']')" "$q")
    s=$(date +%s%N); out=$($G "$terms"); e=$(date +%s%N)
    n=$(echo "$out" | grep -o "'" | wc -l)
    [ $round = 2 ] && echo "$(( (e - s) / 1000 )) $(( n / 2 )) $q" >> $DIR/wall-$LABEL.txt
  done
done
