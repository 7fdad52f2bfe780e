import Foundation

/// A broken invariant: the input, and what went wrong with it (a crash or a hang is not caught
/// here: it ends the process, which is how libFuzzer and the tests see it).
public struct FuzzViolation: Error, Sendable, CustomStringConvertible {
    public var target: String
    public var message: String
    public var input: [UInt8]

    public init(target: String, message: String, input: [UInt8]) {
        self.target = target
        self.message = message
        self.input = input
    }

    public var description: String {
        "\(target): \(message); input (\(input.count) bytes, base64) \(Data(input).base64EncodedString())"
    }
}

/// One parser under fuzzing. `run` feeds it one input and checks the invariants that hold for
/// every input: the precise error types for bad input, round trips for good input.
public protocol FuzzTarget: Sendable {
    /// `wire`, `query`, `unit`: the name `make fuzz` and the corpus folders use.
    var name: String { get }
    /// Real inputs to start from (the corpus seeds).
    var seeds: [[UInt8]] { get }
    /// Tokens of the input's language that mutations plant.
    var dictionary: [String] { get }
    /// Runs one input; true when the input was accepted (parsed, or a valid unit), so that a run
    /// can report how much of it got past the first checks.
    @discardableResult
    func run(_ input: [UInt8]) throws(FuzzViolation) -> Bool
    /// A target's own mutation of `input`, or nil for the byte-level mutator's.
    func structuralMutant(of input: [UInt8], random: inout FuzzRandom) -> [UInt8]?
}

extension FuzzTarget {
    /// By default every mutant is the byte-level mutator's.
    public func structuralMutant(of input: [UInt8], random: inout FuzzRandom) -> [UInt8]? { nil }

    public func violation(_ message: String, _ input: [UInt8]) -> FuzzViolation {
        FuzzViolation(target: name, message: message, input: input)
    }
}
