import Foundation
import SearchlightFuzz
import Testing
import TestThreads

/// Each fuzz target for a bounded number of deterministic mutants (seeded, so a failure is the
/// same input on every run). `make fuzz` runs the same targets for minutes.
@Suite("fuzz targets, bounded", .onOwnThreads) struct FuzzTargetTests {
    static func expectClean(_ report: FuzzRunner.Report) {
        print(report)
        #expect(report.violations.isEmpty, "\(report.violations.map(\.description).joined(separator: "\n"))")
    }

    @Test("the frame decoder, JSON parser, JSON-RPC layer and item validation keep their invariants on mutants")
    func wire() {
        Self.expectClean(FuzzRunner(iterations: 20_000, seconds: 15).run(WireFuzzTarget()))
    }

    @Test("the query parser and compiler keep their invariants on mutants, run against a real index")
    func query() throws {
        let target = try QueryFuzzTarget()
        defer { target.close() }
        Self.expectClean(FuzzRunner(iterations: 15_000, seconds: 15).run(target))
    }

    @Test("the unit-file parser keeps its invariants on mutated XML and binary property lists")
    func unit() {
        Self.expectClean(FuzzRunner(iterations: 15_000, seconds: 15).run(UnitFuzzTarget()))
    }

    /// Fuzz/regressions/TARGET/NAME: inputs that once crashed or broke an invariant, each named
    /// for its bug (and covered by a unit test of that name too).
    static let regressions = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Fuzz/regressions").standardized.path

    @Test("every input a fuzz run once found failing still passes its target")
    func regressions() throws {
        let query = try QueryFuzzTarget()
        defer { query.close() }
        let targets: [any FuzzTarget] = [WireFuzzTarget(), query, UnitFuzzTarget()]
        var replayed = 0
        for target in targets {
            let folder = Self.regressions + "/" + target.name
            for name in ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted() {
                let input = try #require(FileManager.default.contents(atPath: folder + "/" + name))
                #expect(throws: Never.self, "\(target.name)/\(name)") { try target.run(Array(input)) }
                replayed += 1
            }
        }
        #expect(replayed > 0, "the regression inputs are in \(Self.regressions)")
    }
}
