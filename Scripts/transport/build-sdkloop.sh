#!/bin/sh
# Builds sdkloop.swift (or another tool of this folder, blockloop.swift) against this checkout's
# release objects (`swift build -c release` first).
# Usage: Scripts/transport/build-sdkloop.sh [OUTPUT [SOURCE]]   (default /tmp/sdkloop, sdkloop.swift)
set -e
cd "$(dirname "$0")/../.."
R=.build/release
swiftc -O -g -I $R/Modules "${2:-Scripts/transport/sdkloop.swift}" $R/SearchlightKit.build/*.o $R/SearchlightWire.build/*.o -o "${1:-/tmp/sdkloop}"
