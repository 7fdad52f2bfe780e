#!/bin/sh
# Builds sdkloop.swift against this checkout's release objects (`swift build -c release` first).
# Usage: Scripts/transport/build-sdkloop.sh [OUTPUT]   (default /tmp/sdkloop)
set -e
cd "$(dirname "$0")/../.."
R=.build/release
swiftc -O -g -I $R/Modules Scripts/transport/sdkloop.swift $R/SearchlightKit.build/*.o $R/SearchlightWire.build/*.o -o "${1:-/tmp/sdkloop}"
