import Foundation
import SearchlightKit
import SearchlightStore

/// Reindex-all through a real extension process: the daemon launches the Packages sample
/// extension from a unit the bench writes, which parses a generated dpkg `status` file of N
/// paragraphs and donates every installed package; timed from `admin.reindex {wait: true}` to
/// the acknowledgement.
struct ReindexBench {
    static let label = "org.searchlight.bench.packages"
    let corpus: Corpus
    let statusPath: String

    init(corpus: Corpus, daemonDir: String) {
        self.corpus = corpus
        statusPath = daemonDir + "/status"
    }

    /// Writes the unit (before the daemon starts: it reads its units then) and an empty status
    /// file. `Standard` priority, not the sample's `Background`: at nice 10 on a shared 2-core
    /// machine, the figure would measure the other tenants rather than the pipeline.
    func writeUnit(unitsDir: String, extensionPath: String) throws {
        let unit = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
                <key>Label</key><string>\(Self.label)</string>
                <key>BundleIdentifier</key><string>\(Self.label)</string>
                <key>ProgramArguments</key>
                <array><string>\(extensionPath)</string><string>\(statusPath)</string></array>
                <key>ProcessType</key><string>Standard</string>
                <key>TimeOut</key><integer>600</integer>
                <key>IndexExtension</key>
                <dict><key>IndexVersion</key><integer>1</integer></dict>
            </dict>
            </plist>
            """
        try Data(unit.utf8).write(to: URL(fileURLWithPath: "\(unitsDir)/\(Self.label).plist"))
        try Data().write(to: URL(fileURLWithPath: statusPath))
    }

    /// Replaces the status file with `count` installed packages made from the corpus: the fields
    /// dpkg writes, a multi-line description with ` .` paragraph breaks, debtags.
    func writeStatusFile(count: Int) throws {
        let temporary = statusPath + ".new"
        guard let file = fopen(temporary, "w") else { fatal("cannot write \(temporary)") }
        var buffer = ""
        buffer.reserveCapacity(1 << 20)
        for i in 0..<count {
            let e = corpus.entry(i)
            buffer += "Package: \(e.name)\nStatus: install ok installed\nPriority: optional\nSection: \(e.section)\n"
            buffer += "Installed-Size: \(100 + (i * 37) % 50_000)\nMaintainer: Searchlight Bench <bench@example.org>\n"
            buffer += "Architecture: \(e.architecture)\nVersion: \(e.version)\nDescription: \(e.synopsis)\n"
            for line in e.description.split(separator: "\n", omittingEmptySubsequences: false) {
                buffer += line.isEmpty ? " .\n" : " \(line)\n"
            }
            if !e.tags.isEmpty { buffer += "Tag: \(e.tags.joined(separator: ", "))\n" }
            buffer += "\n"
            if buffer.utf8.count > 1 << 20 {
                fputs(buffer, file)
                buffer.removeAll(keepingCapacity: true)
            }
        }
        fputs(buffer, file)
        fclose(file)
        guard rename(temporary, statusPath) == 0 else { fatal("cannot rename \(temporary)") }
    }

    /// One reindex-all of the current status file, until acknowledged. Seconds.
    func reindexAll(socket: String) async throws -> Double {
        let admin = SearchlightConnection(role: .admin, socketPath: socket)
        _ = try await admin.open()
        let start = now()
        let answer = try await admin.call("admin.reindex", ["target": .string(Self.label), "all": true, "wait": true, "reason": "bench"])
        let seconds = now() - start
        await admin.close()
        if let state = answer["state"]?.stringValue, state != "acknowledged", state != "done" {
            fatal("reindex-all ended in state \(state): \(answer.jsonString)")
        }
        return seconds
    }

    /// Items in the index file, to check that the reindex donated every package.
    func indexedCount(path: String) throws -> Int {
        try Database(path: path, readOnly: true).intScalar("SELECT count(*) FROM items")
    }
}
