#include <sqlite3.h>
#include <string.h>
// SQLITE_TRANSIENT is a macro that casts -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type csqlite_transient(void) { return SQLITE_TRANSIENT; }

#include <malloc.h>
// glibc's malloc_trim, to hand freed heap back to the system after a large stream of writes.
static inline void csqlite_release_heap(void) { malloc_trim(0); }

/// glibc's allocator figures over every arena (mallinfo2): bytes taken from the system by sbrk
/// and by mmap, in use, and free but kept.
typedef struct csqlite_malloc_figures {
    size_t arena, mmapped, inUse, free, releasable;
} csqlite_malloc_figures;

static inline csqlite_malloc_figures csqlite_malloc_stats(void) {
    struct mallinfo2 m = mallinfo2();
    csqlite_malloc_figures f = {m.arena, m.hblkhd, m.uordblks + m.hblkhd, m.fordblks, m.keepcost};
    return f;
}

/// SQLite's own heap (every connection's page cache, schemas and statements), bytes now and at most.
static inline void csqlite_memory(sqlite3_int64 *used, sqlite3_int64 *highwater, sqlite3_int64 *pageCache) {
    *used = sqlite3_memory_used();
    *highwater = sqlite3_memory_highwater(0);
    sqlite3_int64 current = 0, high = 0;
    sqlite3_status64(SQLITE_STATUS_PAGECACHE_OVERFLOW, &current, &high, 0);
    *pageCache = current;
}

/// The page cache of one connection, bytes (SQLITE_DBSTATUS_CACHE_USED).
static inline int csqlite_cache_used(sqlite3 *db) {
    int current = 0, high = 0;
    sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_USED, &current, &high, 0);
    return current;
}

// MARK: - FTS5's own tokenizer and statistics, through its public API (fts5_api)
//
// The ranked index (SearchlightStore/Ranked) must see exactly the tokens FTS5 indexed and the
// statistics its bm25() reads, so it asks FTS5 instead of imitating it: the table's tokenizer
// (`unicode61 remove_diacritics 2`) through fts5_api.xFindTokenizer, and the row count and token
// total through an auxiliary function calling xRowCount / xColumnTotalSize.

/// The connection's fts5_api (https://sqlite.org/fts5.html#extending_fts5), or NULL.
static inline fts5_api *csqlite_fts5_api(sqlite3 *db) {
    fts5_api *api = 0;
    sqlite3_stmt *stmt = 0;
    if (sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &stmt, 0) == SQLITE_OK) {
        sqlite3_bind_pointer(stmt, 1, (void *)&api, "fts5_api_ptr", 0);
        sqlite3_step(stmt);
    }
    sqlite3_finalize(stmt);
    return api;
}

/// An instance of one of FTS5's tokenizers, made with the arguments of a table's `tokenize=`.
typedef struct csqlite_tokenizer {
    fts5_tokenizer methods;
    Fts5Tokenizer *instance;
} csqlite_tokenizer;

/// Creates the tokenizer `name` with `args` (e.g. "unicode61", {"remove_diacritics", "2"}).
static inline int csqlite_tokenizer_open(sqlite3 *db, const char *name, const char **args, int nargs, csqlite_tokenizer *out) {
    memset(out, 0, sizeof *out);
    fts5_api *api = csqlite_fts5_api(db);
    if (!api) return SQLITE_ERROR;
    void *user = 0;
    int rc = api->xFindTokenizer(api, name, &user, &out->methods);
    if (rc != SQLITE_OK) return rc;
    return out->methods.xCreate(user, args, nargs, &out->instance);
}

static inline void csqlite_tokenizer_close(csqlite_tokenizer *t) {
    if (t->instance) t->methods.xDelete(t->instance);
    t->instance = 0;
}

typedef int (*csqlite_token_callback)(void *context, int flags, const char *token, int length, int start, int end);

/// Tokenizes `text` as FTS5 does for `flags` (FTS5_TOKENIZE_DOCUMENT or _QUERY), calling `callback`.
static inline int csqlite_tokenize(csqlite_tokenizer *t, int flags, const char *text, int length, void *context,
                                   csqlite_token_callback callback) {
    return t->methods.xTokenize(t->instance, context, flags, text, length, callback);
}

/// sl_fts_totals(fts): "rows tokens" of the FTS5 table, from the same record bm25() reads.
static inline void csqlite_fts5_totals(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx, int n,
                                       sqlite3_value **values) {
    (void)n;
    (void)values;
    sqlite3_int64 rows = 0, tokens = 0;
    int rc = api->xRowCount(fts, &rows);
    if (rc == SQLITE_OK) rc = api->xColumnTotalSize(fts, -1, &tokens);
    if (rc != SQLITE_OK) {
        sqlite3_result_error_code(ctx, rc);
        return;
    }
    char text[48];
    sqlite3_snprintf(sizeof text, text, "%lld %lld", rows, tokens);
    sqlite3_result_text(ctx, text, -1, SQLITE_TRANSIENT);
}

/// sl_bm25(fts, avgdl, idf_0 … idf_{p-1}, w_0 … w_{c-1}): FTS5's bm25() (fts5_aux.c,
/// fts5Bm25Function), operation for operation, with `avgdl` and each phrase's idf given instead of
/// read from this table: a query across several tables scores with their summed statistics.
static inline void csqlite_fts5_bm25(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx, int n,
                                     sqlite3_value **values) {
    const double k1 = 1.2, b = 0.75;
    int nPhrase = api->xPhraseCount(fts);
    int nCol = api->xColumnCount(fts);
    if (n != 1 + nPhrase + nCol) {
        sqlite3_result_error(ctx, "sl_bm25: expected avgdl, one idf per phrase and one weight per column", -1);
        return;
    }
    double *freq = sqlite3_malloc64(sizeof(double) * (nPhrase > 0 ? nPhrase : 1));
    if (!freq) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    for (int i = 0; i < nPhrase; i++) freq[i] = 0.0;
    int nInst = 0, rc = api->xInstCount(fts, &nInst);
    for (int i = 0; rc == SQLITE_OK && i < nInst; i++) {
        int ip, ic, io;
        rc = api->xInst(fts, i, &ip, &ic, &io);
        if (rc == SQLITE_OK) freq[ip] += sqlite3_value_double(values[1 + nPhrase + ic]);
    }
    int nTok = 0;
    if (rc == SQLITE_OK) rc = api->xColumnSize(fts, -1, &nTok);
    if (rc != SQLITE_OK) {
        sqlite3_free(freq);
        sqlite3_result_error_code(ctx, rc);
        return;
    }
    double avgdl = sqlite3_value_double(values[0]);
    double D = (double)nTok, score = 0.0;
    for (int i = 0; i < nPhrase; i++) {
        double idf = sqlite3_value_double(values[1 + i]);
        score += idf * ((freq[i] * (k1 + 1.0)) / (freq[i] + k1 * (1 - b + b * D / avgdl)));
    }
    sqlite3_free(freq);
    sqlite3_result_double(ctx, -1.0 * score);
}

/// Registers sl_fts_totals and sl_bm25 on the connection's FTS5.
static inline int csqlite_register_fts5_totals(sqlite3 *db) {
    fts5_api *api = csqlite_fts5_api(db);
    if (!api) return SQLITE_ERROR;
    int rc = api->xCreateFunction(api, "sl_fts_totals", 0, csqlite_fts5_totals, 0);
    if (rc == SQLITE_OK) rc = api->xCreateFunction(api, "sl_bm25", 0, csqlite_fts5_bm25, 0);
    return rc;
}
