#include <sqlite3.h>
// SQLITE_TRANSIENT is a macro that casts -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type csqlite_transient(void) { return SQLITE_TRANSIENT; }

#include <malloc.h>
// glibc's malloc_trim, to hand freed heap back to the system after a large stream of writes.
static inline void csqlite_release_heap(void) { malloc_trim(0); }
