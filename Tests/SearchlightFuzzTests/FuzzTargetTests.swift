import SearchlightFuzz
import Testing

/// Each fuzz target for a bounded number of deterministic mutants (seeded, so a failure is the
/// same input on every run). `make fuzz` runs the same targets for minutes.
@Suite("fuzz targets, bounded") struct FuzzTargetTests {
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
        Self.expectClean(FuzzRunner(iterations: 5_000, seconds: 15).run(target))
    }

    @Test("the unit-file parser keeps its invariants on mutated XML and binary property lists")
    func unit() {
        Self.expectClean(FuzzRunner(iterations: 5_000, seconds: 15).run(UnitFuzzTarget()))
    }
}
