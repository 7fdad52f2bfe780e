import Foundation
import SearchlightKit

/// Tantivy (the Rust search library Lucene users compare with) as a reference, run in the same
/// bench run on the same documents and user queries: installed with pip into a virtual
/// environment outside the repository (`$XDG_CACHE_HOME/searchlight-bench/tantivy`, or
/// `SEARCHLIGHT_TANTIVY_VENV`), driven by the small Python script below; skipped with a message
/// when it cannot be had. Its figures are in-process (its Python binding's call included), ours
/// through the socket; the queries are the same words, all required, the last one a prefix while
/// it is typed (Tantivy: a regex query, constant-scored, where we score the prefix with bm25),
/// each word's fields boosted with our column weights.
enum TantivyReference {
    static let version = "0.27.0"

    struct Result {
        var version: String
        var indexSeconds: Double
        /// Per query text, and pooled over all of them.
        var p50: [String: Double]
        var p99: [String: Double]
        var pooledP50: Double
        var pooledP99: Double
    }

    /// Measures `queries` (top 20 each, `rounds` times) on `entries`; nil (with a line on stderr)
    /// when Tantivy cannot be installed or run.
    static func measure(entries: [CorpusEntry], queries: [String], rounds: Int) -> Result? {
        guard let python = prepare() else { return nil }
        let dir = NSTemporaryDirectory() + "slbench-tantivy-\(getpid())"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let corpus = dir + "/corpus.jsonl", script = dir + "/reference.py"
        var lines = Data()
        for e in entries {
            let o: JSONValue = ["title": .string(e.name), "contentDescription": .string(e.synopsis), "textContent": .string(e.description),
                "keywords": .string(([e.section] + e.tags).joined(separator: " "))]
            lines.append(contentsOf: o.serialized())
            lines.append(0x0A)
        }
        do {
            try lines.write(to: URL(fileURLWithPath: corpus))
            try Self.script.write(toFile: script, atomically: true, encoding: .utf8)
        } catch {
            progress("tantivy: skipped, cannot write its input: \(error)")
            return nil
        }
        let queryJSON = String(decoding: JSONValue.array(queries.map(JSONValue.string)).serialized(), as: UTF8.self)
        guard let (status, out) = run(python, [script, corpus, String(rounds), queryJSON], timeout: 1800), status == 0,
              let o = try? JSONValue.parse(Array(out.utf8)) else {
            progress("tantivy: skipped, the reference script failed")
            return nil
        }
        var p50: [String: Double] = [:], p99: [String: Double] = [:]
        for q in queries {
            p50[q] = o["perQuery"]?[q]?["p50"]?.doubleValue
            p99[q] = o["perQuery"]?[q]?["p99"]?.doubleValue
        }
        return Result(version: o["version"]?.stringValue ?? version, indexSeconds: o["indexSeconds"]?.doubleValue ?? 0,
            p50: p50, p99: p99, pooledP50: o["pooled"]?["p50"]?.doubleValue ?? .nan, pooledP99: o["pooled"]?["p99"]?.doubleValue ?? .nan)
    }

    /// A Python with Tantivy, installing it into the virtual environment when needed.
    static func prepare() -> String? {
        let env = ProcessInfo.processInfo.environment
        let cache = env["XDG_CACHE_HOME"] ?? (NSHomeDirectory() + "/.cache")
        let venv = env["SEARCHLIGHT_TANTIVY_VENV"] ?? cache + "/searchlight-bench/tantivy"
        let python = venv + "/bin/python"
        if let (status, _) = run(python, ["-c", "import tantivy"], timeout: 60), status == 0 { return python }
        progress("tantivy: installing tantivy==\(version) into \(venv) (pip; once)")
        guard let (made, _) = run("/usr/bin/env", ["python3", "-m", "venv", venv], timeout: 300), made == 0,
              let (installed, output) = run(venv + "/bin/pip", ["install", "--quiet", "tantivy==\(version)"], timeout: 900), installed == 0
        else {
            progress("tantivy: skipped: could not install it with pip (no network, or no python3-venv); "
                + "the Tantivy column stays empty. To provide one: python3 -m venv \(venv) && \(venv)/bin/pip install tantivy==\(version)")
            return nil
        }
        _ = output
        return python
    }

    /// Runs a program; nil when it cannot start. Standard output is returned, standard error
    /// goes to the bench's.
    static func run(_ program: String, _ arguments: [String], timeout: TimeInterval) -> (Int32, String)? {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: program)
        p.arguments = arguments
        let out = Pipe()
        p.standardOutput = out
        do { try p.run() } catch { return nil }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        let deadline = Date().addingTimeInterval(timeout)
        while p.isRunning, Date() < deadline { usleep(10_000) }
        if p.isRunning {
            p.terminate()
            return nil
        }
        return (p.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    static let script = #"""
        # Tantivy reference for searchlight-bench: index the given documents in memory, run each
        # user query (top 20) `rounds` times, print per-query and pooled p50/p99 in milliseconds.
        import json, re, sys, time
        import tantivy

        corpus, rounds, queries = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
        weights = {"title": 10.0, "contentDescription": 3.0, "textContent": 1.0, "keywords": 6.0}
        builder = tantivy.SchemaBuilder()
        for field in weights:
            builder.add_text_field(field, stored=(field == "title"))
        schema = builder.build()
        index = tantivy.Index(schema)
        writer = index.writer(heap_size=200_000_000, num_threads=1)
        started = time.perf_counter()
        with open(corpus, encoding="utf-8") as lines:
            for line in lines:
                writer.add_document(tantivy.Document(**json.loads(line)))
        writer.commit()
        index.reload()
        index_seconds = time.perf_counter() - started
        searcher = index.searcher()

        def build(text):
            words = re.findall(r"\w+", text.lower())
            typing = bool(text) and not text[-1].isspace()
            clauses = []
            for i, word in enumerate(words):
                prefix = typing and i == len(words) - 1
                fields = []
                for field, weight in weights.items():
                    if prefix:
                        q = tantivy.Query.regex_query(schema, field, re.escape(word) + ".*")
                    else:
                        q = tantivy.Query.term_query(schema, field, word)
                    fields.append((tantivy.Occur.Should, tantivy.Query.boost_query(q, weight)))
                clauses.append((tantivy.Occur.Must, tantivy.Query.boolean_query(fields)))
            return tantivy.Query.boolean_query(clauses)

        built = {q: build(q) for q in queries}
        for q in queries:
            for _ in range(10):
                searcher.search(built[q], 20, count=False)
        times = {q: [] for q in queries}
        pooled = []
        for _ in range(rounds):
            for q in queries:
                t = time.perf_counter()
                hits = searcher.search(built[q], 20, count=False).hits
                ms = (time.perf_counter() - t) * 1000
                times[q].append(ms)
                pooled.append(ms)

        def percentile(values, p):
            s = sorted(values)
            return s[max(0, min(len(s) - 1, int(-(-len(s) * p // 1)) - 1))]

        print(json.dumps({
            "version": tantivy.__version__ if hasattr(tantivy, "__version__") else "",
            "indexSeconds": index_seconds,
            "perQuery": {q: {"p50": percentile(v, 0.5), "p99": percentile(v, 0.99)} for q, v in times.items()},
            "pooled": {"p50": percentile(pooled, 0.5), "p99": percentile(pooled, 0.99)},
        }))
        """#
}
