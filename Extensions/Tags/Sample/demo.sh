#!/bin/sh
# Seeds the Tags sample's store with a few demo photos: `make run` runs it before it starts the
# daemon, whose first start then has tags-extension index them, so that
# `searchlight search "natural bridges"` finds the tag and its photos.
#   demo.sh PATH-TO-tags [STORE]     (STORE: the app's default store)
# A store that exists is never touched.
set -eu
TAGS=${1:?usage: demo.sh PATH-TO-tags [STORE]}
STORE=${2:-${XDG_DATA_HOME:-$HOME/.local/share}/searchlight-tags/tags.sqlite}
[ -e "$STORE" ] && exit 0
HERE=$(cd "$(dirname "$0")" && pwd)
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
# With no daemon running yet, each command says the change waits to be indexed: kept quiet here.
tags() { "$TAGS" --store "$STORE" "$@" 2>"$LOG" || { cat "$LOG" >&2; echo "demo.sh: tags $* failed" >&2; exit 1; }; }
sipapu=$(tags add "$HERE/photos/sipapu.png" --name "Sipapu Bridge at sunset")
kachina=$(tags add "$HERE/photos/kachina.png" --name "Kachina Bridge from the trail")
owachomo=$(tags add "$HERE/photos/owachomo.png" --name "Owachomo Bridge under the stars")
arch=$(tags add "$HERE/photos/delicate-arch.png" --name "Delicate Arch")
for photo in "$sipapu" "$kachina" "$owachomo"; do tags tag "$photo" "Natural Bridges State Park"; done
tags tag "$sipapu" "Utah"
tags tag "$arch" "Utah"
tags tag "$arch" "Arches National Park"
tags tag "$owachomo" "night sky"
echo "demo.sh: 4 demo photos in $STORE"
