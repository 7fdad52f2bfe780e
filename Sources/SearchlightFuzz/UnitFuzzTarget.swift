import Foundation
import SearchlightUnits

/// The unit-file parser (XML and binary property lists, then every key's validation).
///
/// Invariants: any file gives a unit or a `UnitProblem` (never a crash), a problem has a message
/// and a fix and prints as one line without control characters, and a unit's label is the one
/// the file name says.
public struct UnitFuzzTarget: FuzzTarget {
    public let name = "unit"
    /// Problems name this path; `Program` paths are checked on disk, `/bin/true` exists.
    static let path = "/nonexistent/searchlight-fuzz/org.example.fuzz.plist"

    public init() {}

    public var dictionary: [String] {
        ["<dict>", "</dict>", "<array>", "</array>", "<key>", "</key>", "<string>", "</string>", "<integer>",
         "</integer>", "<real>", "</real>", "<true/>", "<false/>", "<date>2026-01-01T00:00:00Z</date>", "<data>AAEC</data>",
         "<key>Label</key>", "<key>Program</key>", "<key>ProgramArguments</key>", "<key>IndexExtension</key>",
         "<key>EnvironmentVariables</key>", "<key>SoftResourceLimits</key>", "<key>HardResourceLimits</key>",
         "<key>Umask</key>", "<key>ProcessType</key>", "<key>IndexNames</key>", "<key>label</key>",
         "<key>NumberOfFiles</key>", "<key>TimeOut</key>", "org.example.fuzz", "/bin/true", "-1",
         "18446744073709551616", "1e400", "0777", "&amp;", "&lt;", "&#0;", "&#x1F600;", "&#xD800;", "&bogus;",
         "<![CDATA[x]]>", "<!-- c -->", "<?xml version=\"1.0\" encoding=\"UTF-8\"?>", "<!ENTITY a \"aaaaaaaaaa\">",
         "&a;", "<!DOCTYPE plist [", "]>", "bplist00", "<plist version=\"1.0\">", "</plist>"]
    }

    static let xmlSeed = """
        <?xml version="1.0" encoding="UTF-8"?>
        <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
        <plist version="1.0">
        <dict>
        \t<key>Label</key><string>org.example.fuzz</string>
        \t<key>BundleIdentifier</key><string>org.example.notes</string>
        \t<key>ProgramArguments</key><array><string>/bin/true</string><string>--verbose</string></array>
        \t<key>WorkingDirectory</key><string>/tmp</string>
        \t<key>EnvironmentVariables</key><dict><key>LOG_LEVEL</key><string>debug</string></dict>
        \t<key>Umask</key><integer>63</integer>
        \t<key>ProcessType</key><string>Background</string>
        \t<key>Nice</key><integer>5</integer>
        \t<key>LowPriorityIO</key><true/>
        \t<key>SoftResourceLimits</key><dict><key>NumberOfFiles</key><integer>256</integer></dict>
        \t<key>HardResourceLimits</key><dict><key>NumberOfFiles</key><integer>512</integer></dict>
        \t<key>ThrottleInterval</key><integer>10</integer>
        \t<key>ExitTimeOut</key><real>2.5</real>
        \t<key>TimeOut</key><integer>60</integer>
        \t<key>Disabled</key><false/>
        \t<key>IndexExtension</key>
        \t<dict>
        \t\t<key>IndexVersion</key><integer>2</integer>
        \t\t<key>AcknowledgementTimeout</key><integer>60</integer>
        \t\t<key>MaximumRequestDuration</key><integer>3600</integer>
        \t\t<key>MaximumIdentifiersPerRequest</key><integer>1000</integer>
        \t\t<key>IndexNames</key><array><string></string><string>archive</string></array>
        \t\t<key>RefreshExpiringItems</key><true/>
        \t</dict>
        </dict>
        </plist>
        """

    public var seeds: [[UInt8]] {
        var seeds = [Array(Self.xmlSeed.utf8)]
        seeds.append(Array("""
            <?xml version="1.0" encoding="UTF-8"?>
            <plist version="1.0"><dict><key>Label</key><string>org.example.fuzz</string>\
            <key>Program</key><string>/bin/true</string></dict></plist>
            """.utf8))
        if let root = try? PropertyListSerialization.propertyList(from: Data(Self.xmlSeed.utf8), format: nil),
            let binary = try? PropertyListSerialization.data(fromPropertyList: root, format: .binary, options: 0)
        {
            seeds.append(Array(binary))
        }
        return seeds
    }

    @discardableResult
    public func run(_ input: [UInt8]) throws(FuzzViolation) -> Bool {
        switch UnitParser.parse(data: Data(input), path: Self.path, system: false) {
        case .success(let unit):
            guard unit.label == "org.example.fuzz" else { throw violation("a unit was read with the label \(unit.label)", input) }
            return true
        case .failure(let problem):
            guard !problem.message.isEmpty, !problem.fix.isEmpty else { throw violation("a problem without a message or fix: \(problem)", input) }
            let shown = problem.description
            guard !shown.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) else {
                throw violation("a problem prints control characters: \(shown.debugDescription)", input)
            }
            return false
        }
    }
}
