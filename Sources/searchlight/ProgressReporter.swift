import Foundation

/// Shows how far long work has got: a bar redrawn in place when stderr is a terminal, else a
/// plain line at most every few seconds (logs and CI output stay readable).
struct ProgressReporter {
    let total: Int
    let label: String
    let interactive: Bool
    private let started = ContinuousClock.now
    private var lastDraw: ContinuousClock.Instant?
    private var drewBar = false

    init(total: Int, label: String, interactive: Bool = Console.stderrIsTerminal) {
        self.total = total
        self.label = label
        self.interactive = interactive
        // Plain lines start after the first interval: short work prints only its summary.
        if !interactive { lastDraw = started }
    }

    var elapsed: Double {
        (ContinuousClock.now - started).seconds
    }

    mutating func update(_ completed: Int) {
        let now = ContinuousClock.now
        let interval: Duration = interactive ? .milliseconds(100) : .seconds(5)
        if let lastDraw, now - lastDraw < interval, completed < total { return }
        lastDraw = now
        if interactive {
            Console.errorRaw("\r" + bar(completed) + "\u{1B}[K")
            drewBar = true
        } else if completed < total {
            Console.errorLine("\(label) \(completed)/\(total) items (\(Format.rate(completed, elapsed)) items/s)")
        }
    }

    /// Ends the bar's line so that what follows starts on a fresh one.
    mutating func finish() {
        if drewBar { Console.errorRaw("\r\u{1B}[K") }
        drewBar = false
    }

    private func bar(_ completed: Int) -> String {
        let width = 30
        let fraction = total > 0 ? Double(completed) / Double(total) : 1
        let filled = Int((fraction * Double(width)).rounded(.down))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        let percent = Int((fraction * 100).rounded(.down))
        return "\(label) [\(bar)] \(percent)% \(completed)/\(total)  \(Format.rate(completed, elapsed)) items/s"
    }
}
