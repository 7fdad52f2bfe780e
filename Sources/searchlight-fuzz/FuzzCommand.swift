import Foundation
import SearchlightFuzz

/// The target named `name`, or nil. The query target owns a temporary index.
func makeTarget(_ name: String) -> (any FuzzTarget)? {
    switch name {
    case "wire": return WireFuzzTarget()
    case "unit": return UnitFuzzTarget()
    case "query": return try? QueryFuzzTarget()
    default: return nil
    }
}

#if FUZZING
// Built by `make fuzz` with `-sanitize=fuzzer -DFUZZING`. SwiftPM links an executable's entry
// point itself, so libFuzzer's own `main` is not used: ours hands over to its driver, which
// calls `fuzzOneInput` per input. SEARCHLIGHT_FUZZ_TARGET picks the target; a broken invariant
// stops the run as a crash, so that libFuzzer saves the input.
let fuzzTarget: any FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["SEARCHLIGHT_FUZZ_TARGET"] ?? ""
    guard let target = makeTarget(name) else { fatalError("set SEARCHLIGHT_FUZZ_TARGET to wire, query or unit") }
    return target
}()

typealias FuzzCallback = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt

/// libFuzzer's driver entry (FuzzerInterface.h); pointer and integer arguments only, so the
/// Swift declaration matches the C one.
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: FuzzCallback
) -> CInt

func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? []
    do {
        try fuzzTarget.run(input)
    } catch {
        fatalError("\(error)")
    }
    return 0
}

@main
struct FuzzCommand {
    static func main() {
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(runFuzzerDriver(&argc, &argv, { data, count in fuzzOneInput(data, count) }))
    }
}
#else
/// `searchlight-fuzz TARGET [--iterations N] [--seconds S] [--seed N] [--corpus DIR] [--crashes DIR]`:
/// the deterministic mutation fuzzer for long runs (`make fuzz` without libFuzzer), and
/// `searchlight-fuzz TARGET --write-seeds DIR` to seed a corpus folder.
@main
struct FuzzCommand {
    static let usage = """
        usage: searchlight-fuzz wire|query|unit [--iterations N] [--seconds S] [--seed N] [--corpus DIR] [--crashes DIR]
               searchlight-fuzz wire|query|unit --write-seeds DIR
        """

    static func main() {
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard !arguments.isEmpty, let target = makeTarget(arguments.removeFirst()) else { fail(usage) }
        var runner = FuzzRunner(iterations: Int.max, seconds: 60)
        var crashes: String?
        while !arguments.isEmpty {
            let flag = arguments.removeFirst()
            guard let value = arguments.first else { fail("\(flag) needs a value\n\(usage)") }
            arguments.removeFirst()
            switch flag {
            case "--iterations":
                guard let n = Int(value), n > 0 else { fail("--iterations takes a positive whole number") }
                runner.iterations = n
            case "--seconds":
                guard let s = Double(value), s > 0 else { fail("--seconds takes a positive number") }
                runner.seconds = s
            case "--seed":
                guard let n = UInt64(value) else { fail("--seed takes a whole number") }
                runner.seed = n
            case "--corpus": runner.extraInputs = readCorpus(value)
            case "--crashes": crashes = value
            case "--write-seeds": writeSeeds(target, to: value); return
            default: fail("unknown option \(flag)\n\(usage)")
            }
        }
        let report = runner.run(target)
        (target as? QueryFuzzTarget)?.close()
        print(report)
        for (i, violation) in report.violations.enumerated() {
            print("violation: \(violation)")
            if let crashes {
                try? FileManager.default.createDirectory(atPath: crashes, withIntermediateDirectories: true)
                _ = FileManager.default.createFile(atPath: "\(crashes)/\(target.name)-\(runner.seed)-\(i)", contents: Data(violation.input))
            }
        }
        exit(report.violations.isEmpty ? 0 : 1)
    }

    static func readCorpus(_ folder: String) -> [[UInt8]] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.sorted().compactMap { FileManager.default.contents(atPath: "\(folder)/\($0)").map(Array.init) }
    }

    static func writeSeeds(_ target: any FuzzTarget, to folder: String) {
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for (i, seed) in target.seeds.enumerated() {
            _ = FileManager.default.createFile(atPath: "\(folder)/seed-\(i)", contents: Data(seed))
        }
        (target as? QueryFuzzTarget)?.close()
    }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(2)
    }
}
#endif
