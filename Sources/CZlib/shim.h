// zlib (Debian: zlib1g-dev, which the Swift toolchain itself needs), for searchlight-desktop's
// PNG thumbnails only (KRunner takes pixels, not image files).
#include <zlib.h>
