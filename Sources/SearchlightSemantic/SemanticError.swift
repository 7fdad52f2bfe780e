/// A failure of the semantic layer: model files missing or damaged, a table in the wrong format.
/// The message says what was wrong and what to do (for example the command that installs the model).
public struct SemanticError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// A model file is absent: `make model` (or the install step of the docs) fetches it.
        case modelMissing
        /// A file is there but cannot be what it claims (truncated, wrong shape, bad header).
        case badFormat
        /// An input the caller controls is out of range (a dimension, a count).
        case invalidArgument
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "\(kind.rawValue): \(message)" }
}
