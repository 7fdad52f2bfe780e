#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
@testable import SearchlightUnits

/// A temporary folder with a working extension program (`bin/ext`, a /bin/sh script, 0755) and a
/// plain non-executable file; removed when the value goes away.
private final class UnitFolder: @unchecked Sendable {
    let path: String
    var program: String { path + "/bin/ext" }

    init() throws {
        var template = Array("/tmp/sl-units-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        try makeProgram("bin/ext")
        try "not a program\n".write(toFile: path + "/plain.txt", atomically: false, encoding: .utf8)
        chmod(path + "/plain.txt", 0o644)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }

    @discardableResult
    func makeProgram(_ relative: String, mode: mode_t = 0o755) throws -> String {
        let file = path + "/" + relative
        try FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try "#!/bin/sh\nexit 0\n".write(toFile: file, atomically: false, encoding: .utf8)
        chmod(file, mode)
        return file
    }

    func directory(_ name: String) throws -> String {
        try FileManager.default.createDirectory(atPath: path + "/" + name, withIntermediateDirectories: true)
        return path + "/" + name
    }

    /// Writes `<label>.plist` (or `file`) into `directory` (default: the folder itself).
    @discardableResult
    func writeUnit(_ body: String, label: String = "org.example.notes", in directory: String? = nil, file: String? = nil) throws -> String {
        let unit = (directory ?? path) + "/" + (file ?? label + ".plist")
        try plist(body).write(toFile: unit, atomically: false, encoding: .utf8)
        return unit
    }

    /// The keys of a minimal valid unit, without the surrounding `<dict>`.
    func minimal(label: String = "org.example.notes", bundle: String = "org.example.app", program: String? = nil) -> String {
        "<key>Label</key><string>\(label)</string><key>BundleIdentifier</key><string>\(bundle)</string>"
            + "<key>Program</key><string>\(program ?? self.program)</string>"
    }
}

private func plist(_ body: String) -> String {
    """
    <?xml version="1.0" encoding="UTF-8"?>
    <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
    <plist version="1.0"><dict>\(body)</dict></plist>
    """
}

private func parsed(_ file: String, system: Bool = false) -> ExtensionUnit? { try? UnitParser.parse(contentsOf: file, system: system).get() }

private func problem(_ file: String, system: Bool = false) -> UnitProblem? {
    if case .failure(let p) = UnitParser.parse(contentsOf: file, system: system) { return p }
    return nil
}

/// The problem with unit contents given in memory, as if read from `<name>.plist`.
private func problem(data: Data, name: String) -> UnitProblem? {
    if case .failure(let p) = UnitParser.parse(data: data, path: "/nonexistent/\(name).plist", system: false) { return p }
    return nil
}

@Suite("Unit files", .onOwnThreads)
struct UnitParserTests {
    @Test("a minimal unit gets the defaults of DESIGN §5")
    func defaults() throws {
        let f = try UnitFolder()
        let unit = try #require(parsed(try f.writeUnit(f.minimal())))
        #expect(unit.label == "org.example.notes" && unit.bundleIdentifier == "org.example.app")
        #expect(unit.path == f.path + "/org.example.notes.plist")
        #expect(unit.executable == f.program && unit.arguments == [f.program])
        #expect(unit.workingDirectory == nil && unit.environment.isEmpty && unit.umask == nil)
        #expect(unit.userName == nil && unit.groupName == nil && unit.standardOutPath == nil && unit.standardErrorPath == nil)
        #expect(unit.processType == .background && unit.nice == 10 && unit.lowPriorityIO)
        #expect(unit.softLimits.isEmpty && unit.hardLimits.isEmpty)
        #expect(unit.throttleInterval == 10 && unit.exitTimeOut == 20 && unit.timeOut == 60 && !unit.disabled)
        #expect(unit.indexExtension == IndexExtensionSettings())
        let s = unit.indexExtension
        #expect(s.indexVersion == 1 && s.acknowledgementTimeout == 60 && s.maximumRequestDuration == 3600)
        #expect(s.maximumIdentifiersPerRequest == 1000 && s.indexNames == [""] && s.refreshExpiringItems)
    }

    @Test("every key is read")
    func everyKey() throws {
        let f = try UnitFolder()
        let unit = try #require(parsed(try f.writeUnit(f.minimal() + """
            <key>ProgramArguments</key><array><string>ext</string><string>--verbose</string></array>
            <key>WorkingDirectory</key><string>/var/tmp</string>
            <key>EnvironmentVariables</key><dict><key>LOG_LEVEL</key><string>debug</string></dict>
            <key>Umask</key><string>027</string><key>UserName</key><string>root</string><key>GroupName</key><string>root</string>
            <key>StandardOutPath</key><string>/var/log/out.log</string><key>StandardErrorPath</key><string>/var/log/err.log</string>
            <key>ProcessType</key><string>Interactive</string><key>Nice</key><integer>-5</integer><key>LowPriorityIO</key><true/>
            <key>SoftResourceLimits</key><dict><key>NumberOfFiles</key><integer>512</integer><key>Core</key><integer>0</integer></dict>
            <key>HardResourceLimits</key><dict><key>NumberOfFiles</key><integer>1024</integer><key>CPU</key><integer>18446744073709551615</integer></dict>
            <key>ThrottleInterval</key><real>2.5</real><key>ExitTimeOut</key><integer>5</integer><key>TimeOut</key><integer>300</integer>
            <key>Disabled</key><false/><key>KeepAlive</key><true/><key>OpenWith</key><string>org.example.Notes.desktop</string><key>ContinuesSearch</key><true/>
            <key>IndexExtension</key><dict><key>IndexVersion</key><integer>3</integer><key>AcknowledgementTimeout</key><integer>30</integer>
              <key>MaximumRequestDuration</key><integer>600</integer><key>MaximumIdentifiersPerRequest</key><integer>50</integer>
              <key>IndexNames</key><array><string></string><string>archive</string></array><key>RefreshExpiringItems</key><false/></dict>
            """)))
        #expect(unit.executable == f.program && unit.arguments == ["ext", "--verbose"])
        #expect(unit.workingDirectory == "/var/tmp" && unit.environment == ["LOG_LEVEL": "debug"] && unit.umask == 0o027)
        #expect(unit.userName == "root" && unit.groupName == "root")
        #expect(unit.standardOutPath == "/var/log/out.log" && unit.standardErrorPath == "/var/log/err.log")
        #expect(unit.processType == .interactive && unit.nice == -5 && unit.lowPriorityIO)
        #expect(unit.softLimits == ["NumberOfFiles": 512, "Core": 0])
        #expect(unit.hardLimits == ["NumberOfFiles": 1024, "CPU": UInt64.max])
        #expect(unit.throttleInterval == 2.5 && unit.exitTimeOut == 5 && unit.timeOut == 300 && !unit.disabled)
        #expect(unit.openWith == "org.example.Notes.desktop" && unit.continuesSearch)
        var expected = IndexExtensionSettings()
        (expected.indexVersion, expected.acknowledgementTimeout, expected.maximumRequestDuration) = (3, 30, 600)
        (expected.maximumIdentifiersPerRequest, expected.indexNames, expected.refreshExpiringItems) = (50, ["", "archive"], false)
        #expect(unit.indexExtension == expected)
        #expect(unit.openWith == "org.example.Notes.desktop")
    }

    @Test("Nice and LowPriorityIO follow ProcessType when absent")
    func priorityFromProcessType() throws {
        let f = try UnitFolder()
        let unit = try #require(parsed(try f.writeUnit(f.minimal() + "<key>ProcessType</key><string>Standard</string>")))
        #expect(unit.nice == 0 && !unit.lowPriorityIO)
    }

    @Test("an integer Umask is decimal as in launchd, a string one octal")
    func umaskSpellings() throws {
        let f = try UnitFolder()
        #expect(parsed(try f.writeUnit(f.minimal() + "<key>Umask</key><integer>18</integer>"))?.umask == 0o22)
        #expect(parsed(try f.writeUnit(f.minimal() + "<key>Umask</key><string>0077</string>"))?.umask == 0o77)
    }

    @Test("relative paths are resolved against the unit file's folder, not the working directory")
    func relativeProgram() throws {
        let f = try UnitFolder()
        let unit = try #require(parsed(try f.writeUnit(f.minimal(program: "./bin/ext")
            + "<key>WorkingDirectory</key><string>data</string><key>StandardErrorPath</key><string>logs/err.log</string>")))
        #expect(unit.executable == f.program && unit.arguments == ["./bin/ext"])
        #expect(unit.workingDirectory == f.path + "/data" && unit.standardErrorPath == f.path + "/logs/err.log")
    }

    @Test("ProgramArguments alone gives both the executable and argv")
    func programArgumentsOnly() throws {
        let f = try UnitFolder()
        let unit = try #require(parsed(try f.writeUnit("""
            <key>Label</key><string>org.example.notes</string><key>BundleIdentifier</key><string>org.example.app</string>
            <key>ProgramArguments</key><array><string>bin/ext</string><string>--once</string></array>
            """)))
        #expect(unit.executable == f.program && unit.arguments == ["bin/ext", "--once"])
    }

    @Test("a problem reads: file, key, what is wrong, the fix")
    func problemDescription() throws {
        let f = try UnitFolder()
        let file = try f.writeUnit(f.minimal() + "<key>ThrottleInterval</key><string>ten</string>")
        #expect(problem(file)?.description
                == "\(file): key ThrottleInterval: must be a non-negative number of seconds, not \"ten\"; write e.g. <integer>10</integer>")
    }

    @Test("each invalid value is refused naming the file, the key and a fix", arguments: BadUnit.all)
    func invalidValues(_ bad: BadUnit) throws {
        let f = try UnitFolder()
        let keys = f.minimal().components(separatedBy: "<key>").filter { !$0.isEmpty }
            .filter { entry in !bad.omit.contains { entry.hasPrefix($0 + "</key>") } }
        let file = try f.writeUnit(keys.map { "<key>" + $0 }.joined() + bad.extra)
        let p = try #require(problem(file))
        #expect(p.file == file && p.key == bad.key)
        #expect(p.message.contains(bad.fragment), "\(p)")
        #expect(!p.fix.isEmpty && p.description.hasPrefix("\(file): key \(bad.key): "))
    }

    @Test("a Label that differs from the file name is refused")
    func labelMismatch() throws {
        let f = try UnitFolder()
        let p = try #require(problem(try f.writeUnit(f.minimal(label: "org.example.other"))))
        #expect(p.key == "Label" && p.message.contains("org.example.notes.plist") && p.fix.contains("org.example.other.plist"))
    }

    @Test("garbage, OpenStep text and a non-dictionary root are refused")
    func notAUnit() throws {
        let f = try UnitFolder()
        let cases = [("\u{1}\u{2} garbage <<<", "is not a property list: Unexpected character ? at line 1"),
                     ("{ Label = x; }", "is not an XML property list"),
                     (plist("").replacingOccurrences(of: "<dict></dict>", with: "<array/>"), "holds an array, not a dictionary"),
                     ("", "is not a property list")]
        for (text, message) in cases {
            let file = f.path + "/org.example.notes.plist"
            try text.write(toFile: file, atomically: false, encoding: .utf8)
            let p = try #require(problem(file), "\(text)")
            #expect(p.key == nil && p.message.hasPrefix(message) && p.fix.contains("<plist version=\"1.0\"><dict>"), "\(p)")
        }
    }

    @Test("a binary property list is accepted like the XML one")
    func binaryPlist() throws {
        let f = try UnitFolder()
        let dict: [String: Any] = ["Label": "org.example.notes", "BundleIdentifier": "org.example.app", "Program": f.program,
                                   "Disabled": true, "IndexExtension": ["IndexVersion": 2]]
        let data = try PropertyListSerialization.data(fromPropertyList: dict, format: .binary, options: 0)
        #expect(FileManager.default.createFile(atPath: f.path + "/org.example.notes.plist", contents: data))
        let unit = try #require(parsed(f.path + "/org.example.notes.plist"))
        #expect(unit.disabled && unit.indexExtension.indexVersion == 2)
    }

    @Test("binary plist set crash: a binary property list holding a set is refused, not a crash of Foundation")
    func binaryPlistSetCrash() throws {
        // Found by `make fuzz` (target unit): swift-corelibs Foundation crashed bridging a set.
        let crash = try #require(Data(base64Encoded: "YnBsaXN0MDDfEBABAgMEBQYHCAkKCwwNDg8QERITFBUYGSgrLC0uLzAxNFVVbWFza1hEaXNhYmxlZF1Mb3dQcmlvcml0eUlPXxAQQnVuZGxlSWRlbnRpZmllcl8QEkhhcmRSZXNvdXJjZUxpbWl0c18QEFdvcmtpbmdEaXJlY3RvcnleSW5kZXhFeHRlbnNpb25fEBBQcm9ncmFtQXJndW1lbnRzVE5pY2VXVGltZU91dF8QEFRocm90dGxlSW50ZXJ2YWxVTGFiZWxbRXhpdFRpbWVPdXRbUHJvY2Vzc1R5cGVfEBRFbnZpcm9ubWVudFZhcmlhYmxlc18QElNvZnRSZXNvdXJjZUxpbWl0cxA/CAlfEBFvcmcuZXhhbXBsZS5ub3Ric8EWF11OdW1iZXJPZkZpbGVzEQIAVC90bXDWGhscHR4fEyEkJSYnXxAUUmVmcmVzaEV4cGlyaW5nSXRlbXNaSW5kZXhOYW1lc1xJbmRleFZlcnNpb25fEBZNYXhpbXVtUmVxdWVzdER1cmF0aW9uXxAcTWF4aW11Y0lkZW50aWZpZXJzUGVyUmVxdWVzdF8QFkFja25vd2xlZGdlbWVudFRpbWVvdXQJoiIjUFdhcmNoaXZlEAIRDhARA+gQPKIpKlkvYmluL3RydWVZLS12ZXJib3NlEAUQPBAKXxAQb3JnLmV4YW1wbGUuZnV6ekAjBAAAAAAAAFpCYWNrZ3JvdW5k0TIzWUxPR19MRVZFTFVkZWJ1Z9E1Nl1OdW1iZXJPZkZpbGVzEQEAAAgAKwAxADoASABbAHAAgwCSAKUAqgCyAMUAywDXAOMA+gEPAREBEgETAScBKgE4ATsBQAFNAWQBbwF8AZUBuQHNAc4B0QHSAdoB3AHfAeIB5AHnAfEB+wH9Af8CAQIUAh0CKAIrAjUCOwI+AkwAAAAAAAACAQAAAAAAAAA3AAAAAAAAAAAAAAAAAAACTw=="))
        let p = try #require(problem(data: crash, name: "org.example.fuzz"))
        #expect(p.message.contains("malformed binary property list: a set or UID object"), "\(p)")
    }

    @Test("binary plist reference bomb: shared references expanding to 4^24 objects are refused at once")
    func binaryPlistReferenceBomb() throws {
        // 203 bytes: 24 arrays, each holding four references to the next (Fuzz/regressions/unit).
        let bomb = try #require(Data(base64Encoded: "YnBsaXN0MDDRAQNVTGFiZWxTUGFkpAQEBASkBQUFBaQGBgYGpAcHBwekCAgICKQJCQkJpAoKCgqkCwsLC6QMDAwMpA0NDQ2kDg4ODqQPDw8PpBAQEBCkEREREaQSEhISpBMTExOkFBQUFKQVFRUVpBYWFhakFxcXF6QYGBgYpBkZGRmkGhoaGqQbGxsbUXgICxEVGh8kKS4zOD1CR0xRVltgZWpvdHl+g4iNAAAAAAAAAQEAAAAAAAAAHAAAAAAAAAAAAAAAAAAAAI8="))
        let p = try #require(problem(data: bomb, name: "org.example.fuzz"))
        #expect(p.message.contains("expand to more than 100000 objects"), "\(p)")
    }

    @Test("binary plist cycle: a binary property list whose array contains itself is refused")
    func binaryPlistCycle() throws {
        var data = Data("bplist00".utf8) + Data([0xA1, 0x00, 0x08]) + Data(count: 6) + Data([1, 1])
        for field: UInt64 in [1, 0, 10] { data += withUnsafeBytes(of: field.bigEndian) { Data($0) } }
        let p = try #require(problem(data: data, name: "org.example.fuzz"))
        #expect(p.message.contains("object 0 contains itself"), "\(p)")
    }

    @Test("a unit file over 1 MiB is refused unread")
    func tooLarge() throws {
        let f = try UnitFolder()
        let file = try f.writeUnit(f.minimal() + "<key>Pad</key><string>\(String(repeating: "x", count: 1 << 20))</string>")
        #expect(problem(file)?.message.contains("larger than 1 MiB") == true)
    }

    @Test("a FIFO named like a unit is refused without blocking")
    func fifo() throws {
        let f = try UnitFolder()
        #expect(mkfifo(f.path + "/org.example.notes.plist", 0o644) == 0)
        #expect(problem(f.path + "/org.example.notes.plist")?.message == "is not a regular file")
    }

    @Test("system mode refuses a program others can write; user mode accepts it")
    func worldWritableProgram() throws {
        let f = try UnitFolder()
        chmod(f.program, 0o777)
        let file = try f.writeUnit(f.minimal())
        let p = try #require(problem(file, system: true))
        #expect(p.key == "Program" && p.message.contains("writable by group or others") && p.fix == "run chmod go-w \(f.program)")
        #expect(parsed(file, system: false) != nil)
    }

    @Test("system mode refuses a program in a folder others can write")
    func worldWritableFolder() throws {
        let f = try UnitFolder()
        chmod(f.path + "/bin", 0o777)
        let p = try #require(problem(try f.writeUnit(f.minimal()), system: true))
        #expect(p.key == "Program" && p.message.contains("folder") && p.fix.contains("o-w"))
    }

    @Test("system mode refuses a unit file others can write")
    func worldWritableUnitFile() throws {
        let f = try UnitFolder()
        let file = try f.writeUnit(f.minimal())
        chmod(file, 0o666)
        #expect(problem(file, system: true)?.message.contains("the unit file") == true)
    }

    @Test("system mode refuses an unknown UserName or GroupName")
    func unknownUser() throws {
        let f = try UnitFolder()
        let user = try f.writeUnit(f.minimal() + "<key>UserName</key><string>no-such-user-sl</string>")
        #expect(problem(user, system: true)?.key == "UserName")
        #expect(parsed(user, system: false)?.userName == "no-such-user-sl")
        let group = try f.writeUnit(f.minimal() + "<key>GroupName</key><string>no-such-group-sl</string>")
        #expect(problem(group, system: true)?.key == "GroupName")
        #expect(parsed(try f.writeUnit(f.minimal() + "<key>UserName</key><string>root</string>"), system: true) != nil)
    }

    @Test("a disabled unit loads even when its program is missing")
    func disabledMissingProgram() throws {
        let f = try UnitFolder()
        let unit = try #require(parsed(try f.writeUnit(f.minimal(program: "gone") + "<key>Disabled</key><true/>")))
        #expect(unit.disabled && unit.executable == f.path + "/gone")
    }
}

extension UnitParserTests {
    /// One invalid unit: the minimal unit without the keys in `omit`, plus `extra`.
    struct BadUnit: Sendable, CustomTestStringConvertible {
        var extra = ""
        var omit: [String] = []
        var key: String
        var fragment: String
        var testDescription: String { "\(key): \(fragment)" }

        static func with(_ extra: String, _ key: String, _ fragment: String) -> BadUnit { BadUnit(extra: extra, key: key, fragment: fragment) }
        static func replacing(_ omitted: String, _ extra: String, _ key: String, _ fragment: String) -> BadUnit {
            BadUnit(extra: extra, omit: [omitted], key: key, fragment: fragment)
        }

        static let all: [BadUnit] = [
            .replacing("Label", "", "Label", "is required"),
            .replacing("Label", "<key>Label</key><array/>", "Label", "must be a non-empty string, not an array"),
            .replacing("Label", "<key>Label</key><string>.org.example.notes</string>", "Label", "reverse-DNS"),
            .replacing("BundleIdentifier", "", "BundleIdentifier", "is required"),
            .replacing("BundleIdentifier", "<key>BundleIdentifier</key><string>../etc</string>", "BundleIdentifier", "reverse-DNS"),
            .replacing("Program", "", "Program", "is required (or ProgramArguments)"),
            .replacing("Program", "<key>Program</key><string>missing/ext</string>", "Program", "does not exist"),
            .replacing("Program", "<key>Program</key><string>bin</string>", "Program", "is not a regular file"),
            .replacing("Program", "<key>Program</key><string>plain.txt</string>", "Program", "is not executable"),
            .replacing("Program", "<key>ProgramArguments</key><array/>", "ProgramArguments", "is empty"),
            .replacing("Program", "<key>ProgramArguments</key><array><integer>1</integer></array>", "ProgramArguments[0]", "not 1"),
            .replacing("Program", "<key>ProgramArguments</key><array><string>python3</string></array>", "ProgramArguments", "does not exist"),
            .with("<key>ThrottleInterval</key><integer>-1</integer>", "ThrottleInterval", "from 0 to 86400 seconds, not -1"),
            .with("<key>ExitTimeOut</key><integer>86401</integer>", "ExitTimeOut", "not 86401"),
            .with("<key>TimeOut</key><real>nan</real>", "TimeOut", "number of seconds"),
            .with("<key>TimeOut</key><true/>", "TimeOut", "not <true/>"),
            .with("<key>Disabled</key><integer>1</integer>", "Disabled", "must be a boolean, not 1"),
            .with("<key>OpenWith</key><string>/usr/share/applications/notes.desktop</string>", "OpenWith", "must be a desktop-file id"),
            .with("<key>OpenWith</key><string>notes</string>", "OpenWith", "ending in .desktop"),
            // Issue 29 (D1): a `-` may stand for a `/`, so `..` components climbed out of the applications folder.
            .with("<key>OpenWith</key><string>screensavers-..-..-..-..-tmp-evil.desktop</string>", "OpenWith", "must be a desktop-file id"),
            .with("<key>OpenWith</key><string>a--b.desktop</string>", "OpenWith", "must be a desktop-file id"),
            .with("<key>OpenWith</key><integer>1</integer>", "OpenWith", "not 1"),
            .with("<key>ContinuesSearch</key><true/>", "ContinuesSearch", "declares no OpenWith"),
            .with("<key>ContinuesSearch</key><string>yes</string>", "ContinuesSearch", "must be a boolean"),
            .with("<key>LowPriorityIO</key><string>yes</string>", "LowPriorityIO", "must be a boolean"),
            .with("<key>disabled</key><true/>", "disabled", "case-sensitive"),
            .with("<key>WorkingDirectory</key><string></string>", "WorkingDirectory", "non-empty string"),
            .with("<key>EnvironmentVariables</key><array/>", "EnvironmentVariables", "must be a dictionary"),
            .with("<key>EnvironmentVariables</key><dict><key>A</key><integer>1</integer></dict>", "EnvironmentVariables.A", "must be a string"),
            .with("<key>EnvironmentVariables</key><dict><key>SEARCHLIGHT_EXTENSION_FD</key><string>4</string></dict>",
                  "EnvironmentVariables.SEARCHLIGHT_EXTENSION_FD", "set by the supervisor"),
            .with("<key>Umask</key><string>0999</string>", "Umask", "from 0 to 0777"),
            .with("<key>Umask</key><integer>512</integer>", "Umask", "not 512"),
            .with("<key>ProcessType</key><string>background</string>", "ProcessType", "Background, Standard, Adaptive or Interactive"),
            .with("<key>Nice</key><integer>20</integer>", "Nice", "from -20 to 19"),
            .with("<key>Nice</key><string>5</string>", "Nice", "integer"),
            .with("<key>SoftResourceLimits</key><dict><key>Memory</key><integer>1</integer></dict>", "SoftResourceLimits.Memory", "not a resource limit"),
            .with("<key>HardResourceLimits</key><dict><key>Core</key><integer>-1</integer></dict>", "HardResourceLimits.Core", "non-negative integer"),
            .with("<key>SoftResourceLimits</key><dict><key>Stack</key><integer>9</integer></dict><key>HardResourceLimits</key><dict><key>Stack</key><integer>8</integer></dict>",
                  "SoftResourceLimits.Stack", "above HardResourceLimits.Stack"),
            .with("<key>IndexExtension</key><string>yes</string>", "IndexExtension", "must be a dictionary"),
            .with("<key>IndexExtension</key><dict><key>IndexVersion</key><integer>-1</integer></dict>", "IndexExtension.IndexVersion", "not -1"),
            .with("<key>IndexExtension</key><dict><key>IndexVersion</key><real>1.5</real></dict>", "IndexExtension.IndexVersion", "integer"),
            .with("<key>IndexExtension</key><dict><key>AcknowledgementTimeout</key><integer>0</integer></dict>", "IndexExtension.AcknowledgementTimeout", "from 1 to 86400"),
            .with("<key>IndexExtension</key><dict><key>MaximumRequestDuration</key><integer>604801</integer></dict>", "IndexExtension.MaximumRequestDuration", "from 1 to 604800"),
            .with("<key>IndexExtension</key><dict><key>MaximumIdentifiersPerRequest</key><integer>10001</integer></dict>",
                  "IndexExtension.MaximumIdentifiersPerRequest", "from 1 to 10000"),
            .with("<key>IndexExtension</key><dict><key>IndexNames</key><array/></dict>", "IndexExtension.IndexNames", "is empty"),
            .with("<key>IndexExtension</key><dict><key>IndexNames</key><array><string>ok</string><string>.hidden</string></array></dict>",
                  "IndexExtension.IndexNames[1]", "is not an index name"),
            .with("<key>IndexExtension</key><dict><key>IndexNames</key><array><integer>3</integer></array></dict>", "IndexExtension.IndexNames[0]", "not 3"),
            .with("<key>IndexExtension</key><dict><key>RefreshExpiringItems</key><string>no</string></dict>", "IndexExtension.RefreshExpiringItems", "boolean"),
            .with("<key>IndexExtension</key><dict><key>indexNames</key><array/></dict>", "IndexExtension.indexNames", "case-sensitive"),
        ]
    }
}

@Suite("Unit catalog", .onOwnThreads)
struct UnitCatalogTests {
    @Test("the first directory wins for a file name, and the overridden file is skipped without a problem")
    func firstDirectoryWins() throws {
        let f = try UnitFolder()
        let (etc, lib) = (try f.directory("etc"), try f.directory("lib"))
        try f.writeUnit(f.minimal() + "<key>TimeOut</key><integer>5</integer>", in: etc)
        try f.writeUnit(f.minimal(), in: lib)
        let catalog = UnitCatalog(directories: [etc, lib], system: false)
        let report = catalog.reload()
        #expect(report.loaded.count == 1 && catalog.unit(label: "org.example.notes")?.timeOut == 5)
        #expect(report.problems.isEmpty)
    }

    @Test("a directory listed twice is read once")
    func sameDirectoryTwice() throws {
        let f = try UnitFolder()
        try f.writeUnit(f.minimal())
        let report = UnitCatalog(directories: [f.path, f.path + "/"], system: false).reload()
        #expect(report.loaded.count == 1 && report.problems.isEmpty)
    }

    @Test("a second enabled unit for a bundle is refused naming both files; the first still serves")
    func duplicateBundle() throws {
        let f = try UnitFolder()
        let first = try f.writeUnit(f.minimal(label: "org.example.a"), label: "org.example.a")
        let second = try f.writeUnit(f.minimal(label: "org.example.b"), label: "org.example.b")
        let catalog = UnitCatalog(directories: [f.path], system: false)
        let report = catalog.reload()
        #expect(report.loaded.map(\.label) == ["org.example.a"] && catalog.unit(forBundle: "org.example.app")?.path == first)
        let p = try #require(report.problems.first)
        #expect(report.problems.count == 1 && p.file == second && p.key == "BundleIdentifier" && p.message.contains(first))
    }

    @Test("a disabled unit is listed but serves no bundle, and does not conflict with an enabled one")
    func disabledUnit() throws {
        let f = try UnitFolder()
        try f.writeUnit(f.minimal(label: "org.example.a") + "<key>Disabled</key><true/>", label: "org.example.a")
        try f.writeUnit(f.minimal(label: "org.example.b"), label: "org.example.b")
        let catalog = UnitCatalog(directories: [f.path], system: false)
        let report = catalog.reload()
        #expect(report.problems.isEmpty && catalog.units.map(\.label) == ["org.example.a", "org.example.b"])
        #expect(catalog.unit(label: "org.example.a")?.disabled == true)
        #expect(catalog.unit(forBundle: "org.example.app")?.label == "org.example.b")
    }

    @Test("a broken unit does not stop the others loading")
    func brokenUnitIsolated() throws {
        let f = try UnitFolder()
        try "not a plist".write(toFile: f.path + "/org.example.broken.plist", atomically: false, encoding: .utf8)
        try f.writeUnit(f.minimal(label: "org.example.z", bundle: "org.example.z"), label: "org.example.z")
        try f.writeUnit(f.minimal())
        let catalog = UnitCatalog(directories: [f.path], system: false)
        let report = catalog.reload()
        #expect(report.loaded.map(\.label) == ["org.example.notes", "org.example.z"])
        #expect(report.problems.map(\.file) == [f.path + "/org.example.broken.plist"] && catalog.problems == report.problems)
    }

    @Test("reload picks up added, changed and removed files and says whether anything changed")
    func reloadChanges() throws {
        let f = try UnitFolder()
        let catalog = UnitCatalog(directories: [f.path], system: false)
        #expect(catalog.units.isEmpty && catalog.reload() == .init(loaded: [], problems: [], changed: false))
        let file = try f.writeUnit(f.minimal())
        #expect(catalog.reload().changed && catalog.unit(forBundle: "org.example.app") != nil)
        #expect(!catalog.reload().changed)
        try f.writeUnit(f.minimal() + "<key>ThrottleInterval</key><integer>1</integer>")
        #expect(catalog.reload().changed && catalog.units.first?.throttleInterval == 1)
        try FileManager.default.removeItem(atPath: file)
        #expect(catalog.reload().changed && catalog.units.isEmpty && catalog.unit(label: "org.example.notes") == nil)
    }

    @Test("a missing directory is fine; one that is not a directory is a problem")
    func directoryProblems() throws {
        let f = try UnitFolder()
        let report = UnitCatalog(directories: [f.path + "/missing", f.path + "/plain.txt"], system: false).reload()
        #expect(report.problems.map(\.file) == [f.path + "/plain.txt"] && report.problems[0].message.contains("Not a directory"))
    }

    @Test("a problem prints a hostile file name without its control characters")
    func controlCharacters() throws {
        let f = try UnitFolder()
        try f.writeUnit(f.minimal(), file: "\u{1B}[2J\u{9B}x.plist")
        let p = try #require(UnitCatalog(directories: [f.path], system: false).reload().problems.first)
        #expect(p.file.contains("\u{1B}") && p.description.contains("/?[2J?x.plist: key Label: "))
        #expect(!p.description.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) })
    }

    @Test("system mode reads nothing from a unit directory others can write")
    func worldWritableDirectory() throws {
        let f = try UnitFolder()
        let dir = try f.directory("units")
        try f.writeUnit(f.minimal(), in: dir)
        chmod(dir, 0o777)
        let report = UnitCatalog(directories: [dir], system: true).reload()
        #expect(report.loaded.isEmpty && report.problems.map(\.file) == [dir] && report.problems[0].fix.hasPrefix("run chmod go-w \(dir)"))
        #expect(UnitCatalog(directories: [dir], system: false).reload().loaded.count == 1)
    }

    @Test("only *.plist files that are not dot files are read, at most the cap per directory")
    func scanRules() throws {
        let f = try UnitFolder()
        for label in ["org.example.a", "org.example.b", "org.example.c"] {
            try f.writeUnit(f.minimal(label: label, bundle: label), label: label)
        }
        try f.writeUnit(f.minimal(), file: ".org.example.notes.plist")
        try f.writeUnit(f.minimal(), file: "org.example.notes.plist~")
        #expect(UnitCatalog(directories: [f.path], system: false).reload().loaded.count == 3)
        let capped = UnitCatalog(directories: [f.path], system: false, maximumFilesPerDirectory: 2).reload()
        #expect(capped.loaded.count == 2 && capped.problems.first?.message.contains("more than 2 unit files") == true)
    }
}
