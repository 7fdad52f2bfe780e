#ifndef CDESKTOPBUS_H
#define CDESKTOPBUS_H

#include <systemd/sd-bus.h>
#include <sys/eventfd.h>  // wakes the bus loop when a deferred reply is ready

/// Receives every method call of an exported object; reads the member from the message, and
/// replies now or later (keeping a reference to the message). A negative errno, or a set `error`,
/// answers with an error.
typedef int (*sl_bus_method_handler)(sd_bus_message *m, void *context, sd_bus_error *error);

/// One exported object: the handler and the context given to it. Must outlive the registration.
typedef struct sl_bus_object {
    sl_bus_method_handler handler;
    void *context;
} sl_bus_object;

/// Exports org.gnome.Shell.SearchProvider2 at `path` (introspectable; sd-bus checks signatures).
int sl_bus_add_search_provider(sd_bus *bus, const char *path, sl_bus_object *object);

/// Exports org.kde.krunner1 at `path`.
int sl_bus_add_krunner(sd_bus *bus, const char *path, sl_bus_object *object);

#endif
