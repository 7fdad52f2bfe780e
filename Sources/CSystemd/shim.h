// sd-bus, systemd's D-Bus library (Debian: libsystemd-dev), for searchlight-desktop only.
#include <systemd/sd-bus.h>
