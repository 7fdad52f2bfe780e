// The D-Bus interfaces of searchlight-desktop, as sd-bus vtables. In C because sd-bus builds them
// with C macros (designated initializers over a struct with a bit-field) that Swift cannot import;
// every method goes to one Swift handler, which reads the member from the message.
#include "CDesktopBus.h"

static int dispatch(sd_bus_message *m, void *userdata, sd_bus_error *error) {
    sl_bus_object *object = userdata;
    return object->handler(m, object->context, error);
}

// org.gnome.Shell.SearchProvider2 (GNOME Shell's data/dbus-interfaces/org.gnome.ShellSearchProvider2.xml).
static const sd_bus_vtable search_provider_vtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_METHOD_WITH_ARGS("GetInitialResultSet", SD_BUS_ARGS("as", terms), SD_BUS_RESULT("as", results), dispatch, 0),
    SD_BUS_METHOD_WITH_ARGS("GetSubsearchResultSet", SD_BUS_ARGS("as", previous_results, "as", terms),
                            SD_BUS_RESULT("as", results), dispatch, 0),
    SD_BUS_METHOD_WITH_ARGS("GetResultMetas", SD_BUS_ARGS("as", identifiers), SD_BUS_RESULT("aa{sv}", metas), dispatch, 0),
    SD_BUS_METHOD_WITH_ARGS("ActivateResult", SD_BUS_ARGS("s", identifier, "as", terms, "u", timestamp), SD_BUS_NO_RESULT,
                            dispatch, 0),
    SD_BUS_METHOD_WITH_ARGS("LaunchSearch", SD_BUS_ARGS("as", terms, "u", timestamp), SD_BUS_NO_RESULT, dispatch, 0),
    SD_BUS_VTABLE_END
};

// org.kde.krunner1 (KDE's krunner, src/data/org.kde.krunner1.xml); Config is only called for
// X-Plasma-API=DBus2, which our runner file does not declare.
static const sd_bus_vtable krunner_vtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_METHOD_WITH_ARGS("Match", SD_BUS_ARGS("s", query), SD_BUS_RESULT("a(sssida{sv})", matches), dispatch, 0),
    SD_BUS_METHOD_WITH_ARGS("Actions", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(sss)", matches), dispatch, 0),
    SD_BUS_METHOD_WITH_ARGS("Run", SD_BUS_ARGS("s", matchId, "s", actionId), SD_BUS_NO_RESULT, dispatch, 0),
    SD_BUS_METHOD_WITH_ARGS("Teardown", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, dispatch, 0),
    SD_BUS_VTABLE_END
};

int sl_bus_add_search_provider(sd_bus *bus, const char *path, sl_bus_object *object) {
    return sd_bus_add_object_vtable(bus, NULL, path, "org.gnome.Shell.SearchProvider2", search_provider_vtable, object);
}

int sl_bus_add_krunner(sd_bus *bus, const char *path, sl_bus_object *object) {
    return sd_bus_add_object_vtable(bus, NULL, path, "org.kde.krunner1", krunner_vtable, object);
}
