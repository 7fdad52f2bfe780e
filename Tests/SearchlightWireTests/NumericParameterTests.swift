import Testing
import TestThreads
@testable import SearchlightWire

@Suite("numeric parameters at the wire boundary", .onOwnThreads)
struct NumericParameterTests {
    @Test("an integer in range is taken; absent and null mean not given")
    func integers() throws {
        #expect(try NumericParameter.integer(.number(10), field: "limit", in: 0...100) == 10)
        #expect(try NumericParameter.integer(nil, field: "limit", in: 0...100) == nil)
        #expect(try NumericParameter.integer(.null, field: "limit", in: 0...100, default: 7) == 7)
        #expect(try NumericParameter.integer(.number(0), field: "limit", in: 0...100) == 0)
    }

    @Test("huge, negative, fractional, 2^63 and string integers are invalidParams naming the field and range", arguments: [
        JSONValue.number(1e308), .number(-1), .number(2.5), .number(9.223372036854775808e18), .number(Double("1e-320")!), .string("10"),
        .bool(true), .array([1]),
    ])
    func badIntegers(_ value: JSONValue) {
        do {
            _ = try NumericParameter.integer(value, field: "context.maxResultCount", in: 0...10_000)
            Issue.record("accepted \(value)")
        } catch {
            #expect(error.code == .invalidParams)
            #expect(error.message.contains("\"context.maxResultCount\" must be an integer from 0 to 10000; got"), "\(error.message)")
        }
    }

    @Test("seconds must be finite and in range; the Duration made of them never traps", arguments: [
        JSONValue.number(1e308), .number(-1), .number(Double("1e-320")!), .number(0), .number(9.223372036854775808e18), .string("5"), .bool(false),
    ])
    func badSeconds(_ value: JSONValue) {
        do {
            _ = try NumericParameter.duration(value, field: "timeout", in: 0.001...604_800)
            Issue.record("accepted \(value)")
        } catch {
            #expect(error.code == .invalidParams)
            #expect(error.message.contains("\"timeout\" must be a number of seconds from 0.001 to 604800; got"), "\(error.message)")
        }
    }

    @Test("seconds in range become a Duration rounded up to the millisecond")
    func goodSeconds() throws {
        #expect(try NumericParameter.duration(.number(1.5), field: "timeout", in: 0.001...60) == .milliseconds(1500))
        #expect(try NumericParameter.duration(.number(0.001), field: "timeout", in: 0.001...60) == .milliseconds(1))
        #expect(try NumericParameter.duration(.number(604_800), field: "timeout", in: 0.001...604_800) == .seconds(604_800))
        #expect(try NumericParameter.seconds(nil, field: "timeout", in: 0.001...60) == nil)
    }

    @Test("what was sent is shown short")
    func described() {
        #expect(NumericParameter.describe(.number(1e308)) == "1e+308")
        #expect(NumericParameter.describe(.string(String(repeating: "x", count: 100))).count < 50)
        #expect(NumericParameter.describe(.object([:])) == "a value of type object")
    }
}
