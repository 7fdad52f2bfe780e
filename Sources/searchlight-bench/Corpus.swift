import Foundation
import SearchlightKit

/// One package-shaped document: the Debian corpus's shape, which both the donation items and
/// the dpkg `status` paragraphs of the reindex scenario are made from.
struct CorpusEntry {
    var id: String
    var name: String
    var version: String
    var architecture: String
    var section: String
    var synopsis: String
    var description: String
    var tags: [String]

    /// The item an app would donate (the shape of the first bench and of `searchlight import`).
    var searchableItem: SearchableItem {
        var a = AttributeSet(contentType: "org.debian.deb-archive")
        a.title = name
        a.contentDescription = synopsis
        a.textContent = description
        a.keywords = [section] + tags
        return SearchableItem(uniqueIdentifier: id, attributeSet: a)
    }
}

/// The documents of a run and the words its queries look for (common in that corpus).
struct Corpus {
    var name: String
    var entries: [CorpusEntry]
    /// A frequent word, a prefix of frequent words, and a two-word user query being typed.
    var term: String
    var prefix: String
    var userText: String

    /// The `i`-th entry of a corpus of any size: past the end, copies with a distinct name.
    func entry(_ i: Int) -> CorpusEntry {
        var e = entries[i % entries.count]
        let copy = i / entries.count
        if copy > 0 {
            e.name += "-c\(copy)"
            e.id = "\(e.name)_\(e.version)_\(e.architecture)"
        }
        return e
    }

    /// Reads Debian-shaped JSON lines (`id`, `title`, `contentDescription`, `textContent`,
    /// `keywords`, `domain`) or wire items, gzip-compressed or not.
    static func load(path: String) throws -> Corpus {
        let data = path.hasSuffix(".gz") ? try gunzip(path) : try Data(contentsOf: URL(fileURLWithPath: path))
        var entries: [CorpusEntry] = []
        for line in data.split(separator: 0x0A) {
            guard let o = try? JSONValue.parse(Array(line)) else { continue }
            let a = o["attributeSet"] ?? o
            guard let id = o["id"]?.stringValue ?? o["uniqueIdentifier"]?.stringValue else { continue }
            // Debian ids are name_version_arch.
            let parts = id.split(separator: "_", omittingEmptySubsequences: false).map(String.init)
            let keywords = a["keywords"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let section = o["domain"]?.stringValue ?? o["domainIdentifier"]?.stringValue ?? keywords.first ?? "misc"
            entries.append(CorpusEntry(
                id: id, name: a["title"]?.stringValue ?? parts[0],
                version: parts.count == 3 ? parts[1] : "1.0", architecture: parts.count == 3 ? parts[2] : "all",
                section: section, synopsis: a["contentDescription"]?.stringValue ?? "",
                description: a["textContent"]?.stringValue ?? "",
                tags: keywords.filter { $0 != section }))
        }
        guard !entries.isEmpty else { fatal("the corpus \(path) has no items") }
        return Corpus(name: (path as NSString).lastPathComponent, entries: entries, term: "library", prefix: "pars", userText: "json pars")
    }

    /// `gzip -dc` of a file. A plain file is read directly, without a child process, so the bench
    /// runs under valgrind (whose reserved descriptors break Foundation's `Process`).
    static func gunzip(_ path: String) throws -> Data {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "gzip -dc \"$0\"", path]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { fatal("cannot read the corpus \(path)") }
        return data
    }

    /// A synthetic corpus with Zipf–Mandelbrot word frequencies (the shape of natural text) over
    /// pronounceable pseudo-words, so prefixes are shared the way real words share them.
    /// Deterministic: the same size gives the same corpus, run after run.
    static func synthetic(count: Int) -> Corpus {
        var words = ZipfWords(vocabulary: 50_000, seed: 0x5EA2_C411)
        let sections = ["admin", "devel", "libs", "net", "text", "utils", "web", "python", "games", "doc", "graphics", "sound"]
        var entries: [CorpusEntry] = []
        entries.reserveCapacity(count)
        for i in 0..<count {
            let name = "\(words.next())-\(words.next())\(i)"
            let synopsis = words.sentence(4 + Int(words.random() % 7))
            var lines: [String] = []
            for _ in 0..<(3 + Int(words.random() % 6)) { lines.append(words.sentence(8 + Int(words.random() % 5))) }
            let section = sections[Int(words.random() % UInt64(sections.count))]
            entries.append(CorpusEntry(
                id: "\(name)_1.\(i % 50)-\(i % 7)_amd64", name: name, version: "1.\(i % 50)-\(i % 7)", architecture: "amd64",
                section: section, synopsis: synopsis, description: lines.joined(separator: "\n"),
                tags: ["role::program", "use::\(words.next())", "implemented-in::\(words.next())"]))
        }
        // A frequent word, the three first letters of a frequent word, and a user query mixing both.
        let term = ZipfWords.word(rank: 20)
        let prefix = String(ZipfWords.word(rank: 7).prefix(3))
        return Corpus(name: "synthetic-\(sizeLabel(count))", entries: entries, term: term, prefix: prefix,
            userText: "\(ZipfWords.word(rank: 3)) \(String(ZipfWords.word(rank: 40).prefix(3)))")
    }
}

/// Draws words with Zipf–Mandelbrot frequencies: p(rank k) ∝ 1 / (k + 2.7), as in English text.
struct ZipfWords {
    private var state: UInt64
    private let cumulative: [Double]
    private let vocabulary: [String]

    init(vocabulary size: Int, seed: UInt64) {
        state = seed
        var total = 0.0
        cumulative = (0..<size).map { k in
            total += 1 / (Double(k) + 2.7)
            return total
        }
        vocabulary = (0..<size).map(Self.word(rank:))
    }

    /// SplitMix64: fast and seedable (the system generator costs a syscall per draw here).
    mutating func random() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func next() -> String {
        let u = Double(random() >> 11) / Double(1 << 53) * cumulative[cumulative.count - 1]
        var low = 0, high = cumulative.count - 1
        while low < high {
            let mid = (low + high) / 2
            if cumulative[mid] < u { low = mid + 1 } else { high = mid }
        }
        return vocabulary[low]
    }

    mutating func sentence(_ n: Int) -> String {
        (0..<n).map { _ in next() }.joined(separator: " ")
    }

    /// The pronounceable word of a rank: consonant–vowel syllables, frequent words short.
    static func word(rank: Int) -> String {
        let consonants = Array("bdfgklmnprstvz"), vowels = Array("aeiou")
        var n = rank + 70  // at least two syllables: a 3-letter prefix is shared by a few words, not all
        var s = ""
        repeat {
            s.append(consonants[n % consonants.count])
            n /= consonants.count
            s.append(vowels[n % vowels.count])
            n /= vowels.count
        } while n > 0
        return s
    }
}
