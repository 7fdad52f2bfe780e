#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightFuzz
import SearchlightKit
import Testing
import TestThreads

/// Hostile clients against the real daemon (Docs/Reliability.md, "Hostile input and fuzzing"):
/// after each, the daemon is alive, other clients are served, no index is damaged, and its
/// memory has not grown without bound.
@Suite("Hostile clients against the daemon", .onOwnThreads, .serialized)
struct HostileClientTests {
    /// The daemon's resident memory in KiB, from /proc.
    static func residentKiB(_ daemon: DaemonProcess) throws -> Int {
        let pid = try #require(daemon.process?.processIdentifier)
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    /// A well-behaved client is served, and `admin.check` finds every index sound.
    static func expectHealthy(_ daemon: DaemonProcess, bundle: String = "com.example.healthy") throws {
        let c = try RawClient(path: daemon.socket)
        try c.initialize(bundle: bundle)
        let id = "healthy-\(UUID().uuidString)"
        #expect(try c.call(1, "index.items", ["items": [["uniqueIdentifier": .string(id)]]])?["result"] != nil)
        let found = try c.call(2, "query.search", ["query": .string("uniqueIdentifier == \"\(id)\"")])
        #expect(found?["result"]?["items"]?.arrayValue?.count == 1)
        let admin = try RawClient(path: daemon.socket)
        #expect(try admin.call(1, "initialize", ["protocolVersion": 1, "role": "admin"])?["result"] != nil)
        let check = try admin.call(2, "admin.check", ["repair": false])
        #expect(check?["result"]?["ok"] == true, "admin.check: \(String(describing: check))")
    }

    static func request(_ id: Int, _ method: String, params: String) -> [UInt8] {
        Array(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(params)}"#.utf8) + [0x0A]
    }

    @Test("nesting past the depth limits is a JSON-RPC error and the connection stays usable")
    func deepNesting() throws {
        let daemon = try DaemonProcess()
        let c = try RawClient(path: daemon.socket)
        try c.initialize()
        for depth in [129, 10_000, 1_000_000] {
            let nested = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
            try c.socket.writeAll(Self.request(1, "index.items", params: #"{"items":\#(nested)}"#))
            let answer = try #require(try c.next())
            #expect(answer["error"]?["code"] == -32700)
            #expect(answer["error"]?["message"]?.stringValue?.contains("nesting deeper than 128") == true)
        }
        let query = String(repeating: "(", count: 65) + "rankingHint == 1" + String(repeating: ")", count: 65)
        let answer = try c.call(2, "query.search", ["query": .string(query)])
        #expect(answer?["error"]?["code"] == -2002)
        #expect(try c.call(3, "index.items", ["items": [["uniqueIdentifier": "after-nesting"]]])?["result"] != nil)
        try Self.expectHealthy(daemon)
    }

    @Test("invalid UTF-8 in strings and keys is a parse error, applies nothing, and the connection stays usable")
    func invalidUTF8() throws {
        let daemon = try DaemonProcess()
        let c = try RawClient(path: daemon.socket)
        try c.initialize()
        let bad: [[UInt8]] = [[0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xFF], [0xE2, 0x82]]
        for (k, sequence) in bad.enumerated() {
            let inValue = Array(#"{"jsonrpc":"2.0","id":1,"method":"index.items","params":{"items":[{"uniqueIdentifier":"v"#.utf8)
                + sequence + Array(#""}]}}"#.utf8) + [0x0A]
            let inKey = Array(#"{"jsonrpc":"2.0","id":2,"method":"index.items","params":{"items":[{"uniqueIdentifier":"k","attributeSet":{"custom":{"a"#.utf8)
                + sequence + Array(#"":1}}}]}}"#.utf8) + [0x0A]
            for frame in [inValue, inKey] {
                try c.socket.writeAll(frame)
                let answer = try #require(try c.next())
                #expect(answer["error"]?["code"] == -32700, "sequence \(k): \(answer)")
                #expect(answer["error"]?["message"]?.stringValue?.contains("invalid UTF-8") == true)
            }
        }
        // Lone surrogate escapes are refused the same way.
        try c.socket.writeAll(Self.request(3, "index.items", params: #"{"items":[{"uniqueIdentifier":"\ud800"}]}"#))
        #expect(try c.next()?["error"]?["code"] == -32700)
        let all = try c.call(4, "query.search", ["query": "uniqueIdentifier == \"*\""])
        #expect(all?["result"]?["items"]?.arrayValue?.isEmpty == true, "nothing was applied")
        try Self.expectHealthy(daemon)
    }

    @Test("more than 10 000 identifiers in a call is a clear error and deletes nothing")
    func hugeIdentifierList() throws {
        let daemon = try DaemonProcess()
        let c = try RawClient(path: daemon.socket)
        try c.initialize()
        #expect(try c.call(1, "index.items", ["items": [["uniqueIdentifier": "keep"]]])?["result"] != nil)
        let identifiers = JSONValue.array(["keep"] + (0..<10_000).map { .string("id-\($0)") })
        let answer = try c.call(2, "index.deleteIdentifiers", ["identifiers": identifiers])
        #expect(answer?["error"]?["code"] == -32602)
        #expect(answer?["error"]?["message"]?.stringValue?.contains("send at most 10000 per call") == true)
        let domains = JSONValue.array((0...10_000).map { .string("d\($0)") })
        #expect(try c.call(3, "index.deleteDomains", ["domains": domains])?["error"]?["code"] == -32602)
        let kept = try c.call(4, "query.search", ["query": "uniqueIdentifier == \"keep\""])
        #expect(kept?["result"]?["items"]?.arrayValue?.count == 1, "nothing was deleted")
        try Self.expectHealthy(daemon)
    }

    @Test("huge numbers and excess precision are refused precisely, never trapped on")
    func hugeNumbers() throws {
        let daemon = try DaemonProcess()
        let c = try RawClient(path: daemon.socket)
        try c.initialize()
        let cases: [(params: String, method: String, code: Int)] = [
            (#"{"items":[{"uniqueIdentifier":"n","attributeSet":{"rankingHint":1e400}}]}"#, "index.items", -32700),
            (#"{"items":[{"uniqueIdentifier":"n","attributeSet":{"rankingHint":100.0000000001}}]}"#, "index.items", -1001),
            (#"{"items":[{"uniqueIdentifier":"n","attributeSet":{"custom":{"big":1.7976931348623157e308}}}]}"#, "index.items", 0),
            (#"{"query":"rankingHint > 1e999"}"#, "query.search", -2002),
            (#"{"query":"rankingHint > 1","limit":1e300}"#, "query.search", -32602),
            (#"{"query":"rankingHint > 1","limit":-9223372036854775809}"#, "query.search", -32602),
            (#"{"query":"rankingHint > 1","limit":2.5}"#, "query.search", -32602),
            (#"{"query":"rankingHint > 1","cursor":"99999999999999999999999"}"#, "query.search", -32602),
            (#"{"text":"x","context":{"maxResultCount":1e300,"maxSuggestionCount":9007199254740993}}"#, "query.user", -32602),
        ]
        for (k, test) in cases.enumerated() {
            try c.socket.writeAll(Self.request(10 + k, test.method, params: test.params))
            let answer = try #require(try c.next(), "case \(k): the daemon closed the connection")
            if test.code == 0 {
                #expect(answer["result"] != nil, "case \(k): \(answer)")
            } else {
                #expect(answer["error"]?["code"] == .number(Double(test.code)), "case \(k): \(answer)")
            }
        }
        // An id that is not an exact integer is refused, not rounded into another request's id.
        try c.send(#"{"jsonrpc":"2.0","id":1e300,"method":"index.fetchLastClientState","params":{}}"# + "\n")
        #expect(try c.next()?["error"]?["code"] == -32600)
        try Self.expectHealthy(daemon)
    }

    @Test("a client dribbling a frame byte by byte is closed after --incomplete-frame-timeout")
    func dribblingClient() async throws {
        let daemon = try await DaemonProcess(arguments: ["--incomplete-frame-timeout", "2"])
        let c = try RawClient(path: daemon.socket)
        try c.initialize()
        let frame = Array(#"{"jsonrpc":"2.0","id":1,"method":"index.items","params":{"items":["#.utf8)
        let started = Date()
        var closed = false
        // One byte every 100 ms, looping over the frame's start: never a whole frame. The pacing
        // is the attacker's; what we wait for is the daemon closing the connection.
        for k in 0..<600 {
            do {
                try c.socket.writeAll([frame[k % frame.count]])
            } catch {
                closed = true
                break
            }
            usleep(100_000)
        }
        #expect(closed, "the dribbling client was closed")
        #expect(Date().timeIntervalSince(started) < 30)
        try await daemon.waitForLog("a frame was left unfinished for 2 s")
        try Self.expectHealthy(daemon)
    }

    @Test("stalled clients filling --max-connections get the next client a clear refusal, and free their slots at the timeout")
    func connectionLimit() async throws {
        let daemon = try await DaemonProcess(arguments: ["--max-connections", "4", "--incomplete-frame-timeout", "3"])
        var stalled: [RawClient] = []
        for _ in 0..<4 {
            let s = try RawClient(path: daemon.socket)
            try s.send(#"{"jsonrpc":"2.0","id":1,"#)
            stalled.append(s)
        }
        let refused = try RawClient(path: daemon.socket)
        let refusal = try refused.next()
        #expect(refusal?["error"]?["code"] == -1000)
        #expect(refusal?["error"]?["message"]?.stringValue?.contains("4 connections, its limit; retry later") == true)
        try await daemon.waitForLog("connection refused: too many connections")
        for s in stalled { #expect(try s.next() == nil, "closed at the incomplete-frame timeout") }
        // The slots are released as the stalled connections' threads finish.
        let deadline = Date().addingTimeInterval(30)
        var served = false
        while !served, Date() < deadline {
            let c = try RawClient(path: daemon.socket)
            served = try c.call(1, "initialize", ["protocolVersion": 1, "role": "app", "bundleIdentifier": "com.x"])?["result"] != nil
            if !served { usleep(100_000) }
        }
        #expect(served)
        try Self.expectHealthy(daemon)
    }

    @Test("a client that never reads its answers stalls only itself, and the daemon's memory stays bounded")
    func neverReads() throws {
        let daemon = try DaemonProcess()
        let setup = try RawClient(path: daemon.socket)
        try setup.initialize(bundle: "com.example.big")
        let text = String(repeating: "lorem ipsum dolor ", count: 500)
        let items = JSONValue.array((0..<200).map { ["uniqueIdentifier": .string("big-\($0)"), "attributeSet": ["textContent": .string(text)]] })
        #expect(try setup.call(1, "index.items", ["items": items])?["result"] != nil)
        let before = try Self.residentKiB(daemon)

        let reader = try RawClient(path: daemon.socket)
        try reader.initialize(bundle: "com.example.big")
        reader.socket.setSendTimeout(seconds: 2)
        // ~1.8 MB per answer; the client writes until its own writes block (the daemon stopped
        // reading because its answer write is blocked), then stops.
        let search = Self.request(9, "query.search", params: #"{"query":"uniqueIdentifier == \"*\"","limit":200}"#)
        var sent = 0
        while sent < 5_000 {
            do { try reader.socket.writeAll(search) } catch { break }
            sent += 1
        }
        #expect(sent < 5_000, "the daemon stopped reading from a client that does not read")
        for round in 0..<5 { try Self.expectHealthy(daemon, bundle: "com.example.other\(round)") }
        let after = try Self.residentKiB(daemon)
        print("never-reads: requests_sent=\(sent) rss_before_kib=\(before) rss_after_kib=\(after)")
        #expect(after - before < 200 * 1024, "RSS grew from \(before) KiB to \(after) KiB")
        reader.socket.shutdown()
    }

    @Test("never-reading deferred flood: a client pipelining deferred calls without reading stalls neither other clients' deferred calls nor memory")
    func neverReadsDeferredFlood() throws {
        let daemon = try DaemonProcess()
        let before = try Self.residentKiB(daemon)
        let flooder = try RawClient(path: daemon.socket)
        try flooder.initialize(bundle: "com.example.flood")
        flooder.socket.setSendTimeout(seconds: 2)
        // index.fetchData is answered from a task (it may wait on an extension); with none
        // installed the answer is an immediate unknownExtension error, which this client never reads.
        let request = Self.request(1, "index.fetchData", params: #"{"identifier":"x","typeIdentifier":"public.data"}"#)
        let batch = Array([[UInt8]](repeating: request, count: 500).joined())
        var sent = 0
        let deadline = Date().addingTimeInterval(60)
        while sent < 400_000, Date() < deadline {
            do { try flooder.socket.writeAll(batch) } catch { break }
            sent += 500
        }
        #expect(sent < 400_000, "the daemon stops reading from a client with too many answers outstanding")
        let other = try RawClient(path: daemon.socket)
        try other.initialize(bundle: "com.example.other")
        let started = Date()
        let answer = try other.call(2, "index.fetchData", ["identifier": "x", "typeIdentifier": "public.data"])
        let waited = Date().timeIntervalSince(started)
        #expect(answer?["error"]?["code"] == -3002)
        // Stalled, this waits out the flooder's 30 s send timeout; served, it takes milliseconds.
        #expect(waited < 10, "another client's deferred call waited \(waited) s")
        let after = try Self.residentKiB(daemon)
        print("never-reads-deferred: requests_sent=\(sent) rss_before_kib=\(before) rss_after_kib=\(after) other_waited_s=\(waited)")
        #expect(after - before < 200 * 1024, "RSS grew from \(before) KiB to \(after) KiB")
        flooder.socket.shutdown()
        try Self.expectHealthy(daemon)
    }

    @Test("pipelined garbage gets one error per bad line, in order, and the good requests between are answered")
    func pipelinedGarbage() throws {
        let daemon = try DaemonProcess()
        let c = try RawClient(path: daemon.socket)
        try c.initialize()
        let garbage: [[UInt8]] = [
            Array("not json".utf8), [0xFF, 0xFE, 0x00], Array("[1,2,3]".utf8), Array("{\"jsonrpc\":\"2.0\"}".utf8),
            Array("{\"jsonrpc\":\"1.0\",\"id\":5,\"method\":\"x\"}".utf8), Array("{\"id\":{},\"method\":\"x\"}".utf8),
            Array("\"\\ud800\"".utf8), Array("{\"a\":1,\"a\":2}".utf8), [0xEF, 0xBB, 0xBF] + Array("{}".utf8),
        ]
        var stream: [UInt8] = []
        var expected = 0
        for round in 0..<100 {
            for g in garbage { stream += g + [0x0A] }
            stream += Self.request(1000 + round, "index.fetchLastClientState", params: "{}")
            expected += garbage.count + 1
        }
        try c.socket.writeAll(stream)
        var answers: [JSONValue] = []
        for _ in 0..<expected { answers.append(try #require(try c.next())) }
        let good = answers.filter { $0["result"] != nil }.compactMap { $0["id"]?.intValue }
        #expect(good == Array(1000..<1100), "every good request answered, in order")
        #expect(answers.filter { $0["error"] != nil }.count == 100 * garbage.count)
        try Self.expectHealthy(daemon)
    }
}

/// The wire fuzz target's mutants sent to the real daemon, so that every method's parameter
/// decoding (not only the parsers the fuzz targets reach in-process) meets hostile input.
@Suite("Fuzzed frames against the daemon", .onOwnThreads, .serialized)
struct DaemonFuzzTests {
    @Test("mutated requests get precise errors, never internalError, and never close the connection")
    func mutatedFrames() throws {
        let daemon = try DaemonProcess()
        let c = try RawClient(path: daemon.socket)
        try c.initialize(bundle: "com.example.fuzzed")
        let target = WireFuzzTarget()
        let mutator = FuzzMutator(dictionary: target.dictionary, maxLength: 16 << 10)
        // The seeds' frames one by one, without their newlines, and a call of every method.
        let more = [
            #"{"jsonrpc":"2.0","id":20,"method":"index.deleteDomains","params":{"domains":["notes.work"]}}"#,
            #"{"jsonrpc":"2.0","id":21,"method":"index.beginBatch","params":{"index":"archive"}}"#,
            #"{"jsonrpc":"2.0","id":22,"method":"index.endBatch","params":{"expectedClientState":"AAE=","newClientState":"AAI="}}"#,
            #"{"jsonrpc":"2.0","id":23,"method":"query.user","params":{"text":"quart rep","context":{"enableRankedResults":true,"maxRankedResultCount":3,"maxResultCount":10,"maxSuggestionCount":2,"filterQueries":["rankingHint > 1"],"fetchAttributes":["title"]}}}"#,
            #"{"jsonrpc":"2.0","id":24,"method":"query.engaged","params":{"identifier":"n1","interaction":"select","text":"rep"}}"#,
            #"{"jsonrpc":"2.0","id":25,"method":"index.fetchFileURL","params":{"identifier":"n1","typeIdentifier":"public.data","inPlace":true}}"#,
            #"{"jsonrpc":"2.0","id":26,"method":"query.search","params":{"query":"* == "q*"cd","filterQueries":["InRange(rankingHint, 1, 60)"],"limit":2,"cursor":"1"}}"#,
            #"{"jsonrpc":"2.0","id":27,"method":"admin.status","params":{}}"#,
        ].map { Array($0.utf8) }
        let seeds = target.seeds.flatMap { $0.split(separator: 0x0A).map { Array($0).filter { $0 != 0x0D } } } + more
        let parsedSeeds = seeds.compactMap { try? JSONValue.parse($0) }
        let structural = JSONMutator()
        var random = FuzzRandom(seed: 6)
        var answered = 0
        var codes: [Int: Int] = [:]
        for k in 0..<3_000 {
            // One line per mutant (a newline inside would only split it), then a marker call whose
            // answer says every answer to the mutant has arrived.
            // Two in three structural (they parse, so they reach each method's parameters).
            var frame = random.below(3) > 0
                ? structural.mutateRequest(random.pick(parsedSeeds), random: &random).serialized()
                : mutator.mutate(random.pick(seeds), others: seeds, random: &random).filter { $0 != 0x0A && $0 != 0x0D }
            frame.append(0x0A)
            let marker = 1_000_000 + k
            try c.socket.writeAll(frame + Array(#"{"jsonrpc":"2.0","id":\#(marker),"method":"index.fetchLastClientState","params":{}}"#.utf8) + [0x0A])
            while true {
                let answer = try #require(try c.next(), "the daemon closed the connection after \(String(decoding: frame, as: UTF8.self).prefix(300))")
                if answer["id"]?.intValue == marker { break }
                answered += 1
                if let code = answer["error"]?["code"]?.intValue {
                    codes[code, default: 0] += 1
                    #expect(code != -32603, "internalError for \(String(decoding: frame, as: UTF8.self).prefix(300)): \(answer)")
                }
            }
        }
        print("daemon-fuzz: mutants=3000 answered=\(answered) error_codes=\(codes.sorted { $0.key < $1.key })")
        try HostileClientTests.expectHealthy(daemon)
    }
}
