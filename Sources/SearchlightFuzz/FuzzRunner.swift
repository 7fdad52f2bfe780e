import Foundation

/// The deterministic mutation fuzzer: from the target's seeds (and a corpus folder's inputs, if
/// given), mutants made with a seeded generator, each run through the target with its work timed.
/// The same seed and budget give the same inputs on every machine.
public struct FuzzRunner: Sendable {
    public var iterations: Int
    /// Stop early when this much time has gone by (the iteration count still bounds the run).
    public var seconds: Double?
    public var seed: UInt64 = 0x5EA2_C411_6417
    /// One input taking longer than this is a hang (generous: debug builds, shared cores).
    public var slowInputSeconds = 5.0
    /// Inputs kept besides the seeds: corpus files, and mutants worth mutating further.
    public var extraInputs: [[UInt8]] = []

    public init(iterations: Int, seconds: Double? = nil) {
        self.iterations = iterations
        self.seconds = seconds
    }

    public struct Report: Sendable, CustomStringConvertible {
        public var target: String
        public var iterations = 0
        public var elapsed = 0.0
        public var slowest = 0.0
        /// Inputs the target accepted (parsed, valid): how deep the mutants got.
        public var accepted = 0
        public var violations: [FuzzViolation] = []
        public var executionsPerSecond: Double { elapsed > 0 ? Double(iterations) / elapsed : 0 }
        public var description: String {
            "fuzz target=\(target) iterations=\(iterations) seconds=\(String(format: "%.1f", elapsed)) " +
                "execs_per_s=\(Int(executionsPerSecond)) accepted=\(accepted) slowest_ms=\(Int(slowest * 1000)) violations=\(violations.count)"
        }
    }

    /// Runs the seeds as they are, then mutants; stops at the first ten violations.
    public func run(_ target: some FuzzTarget) -> Report {
        let mutator = FuzzMutator(dictionary: target.dictionary)
        var random = FuzzRandom(seed: seed)
        let pool = target.seeds + extraInputs
        var report = Report(target: target.name)
        let started = Date()
        var previous = pool.first ?? []
        for k in 0..<iterations {
            if let seconds, k % 64 == 0, Date().timeIntervalSince(started) >= seconds { break }
            let input: [UInt8]
            if k < pool.count {
                input = pool[k]
            } else {
                // Mostly fresh mutants of the pool; sometimes a mutant of the last one, so that
                // mutations stack.
                let base = random.oneIn(4) ? previous : random.pick(pool)
                input = target.structuralMutant(of: base, random: &random)
                    ?? mutator.mutate(base, others: pool, random: &random)
            }
            previous = input
            let t0 = Date()
            do {
                if try target.run(input) { report.accepted += 1 }
            } catch {
                report.violations.append(error)
            }
            let took = Date().timeIntervalSince(t0)
            report.slowest = max(report.slowest, took)
            if took > slowInputSeconds {
                report.violations.append(target.violation("one input took \(String(format: "%.1f", took)) s", input))
            }
            report.iterations += 1
            if report.violations.count >= 10 { break }
        }
        report.elapsed = Date().timeIntervalSince(started)
        return report
    }
}
