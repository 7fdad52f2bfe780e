import Foundation
import SearchlightKit

/// `searchlight-desktop --show-search [searchlight-search:TEXT]`: the Searchlight app of
/// `searchlight.desktop` (a terminal app), which GNOME Shell's LaunchSearch opens with the terms.
/// It shows the results of the same desktop search, numbered; a number opens that result (as
/// ActivateResult does), other text searches again, an empty line or end of input quits.
enum TerminalSearch {
    static func run(uri: String?, search: DesktopSearch) -> Int32 {
        print("Searchlight: type words and Enter to search; a result's number opens it; an empty line quits.")
        var text = uri.flatMap(SearchTermsURI.text(of:))
        var shown: [SearchResult] = []
        var terms: [String] = []
        while true {
            if let query = text?.trimmingCharacters(in: .whitespaces), !query.isEmpty {
                let words = query.split(separator: " ").map(String.init)
                terms = words
                shown = (try? wait { await search.search(words) }) ?? []
                print("")
                if shown.isEmpty { print("No results for \"\(query)\".") }
                for (i, r) in shown.enumerated() {
                    let description = r.description.isEmpty ? "" : " — " + r.description
                    print("\(String(i + 1).leftPadded(3)). \(r.name)\(description)  [\(r.appName)]")
                }
            }
            print(shown.isEmpty ? "search> " : "number to open, or a new search> ", terminator: "")
            fflush(nil)
            guard let line = readLine()?.trimmingCharacters(in: .whitespaces), !line.isEmpty else { return 0 }
            if let n = Int(line), (1...shown.count).contains(n) {
                let result = shown[n - 1]
                let words = terms
                do {
                    let opened = try wait { try await search.open(result, terms: words) }
                    print("opened \(result.name) (\(opened.command.dropFirst().prefix(2).joined(separator: " ")))")
                } catch {
                    print("could not open \(result.name): \(error)")
                }
                text = nil
            } else {
                text = line
            }
        }
    }

    /// Runs async work from this synchronous, terminal-driven loop.
    private static func wait<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) throws -> T {
        let box = ResultBox<T>()
        let done = DispatchSemaphore(value: 0)
        Task {
            do { box.result = .success(try await work()) } catch { box.result = .failure(error) }
            done.signal()
        }
        done.wait()
        return try box.result!.get()
    }
}

private final class ResultBox<T: Sendable>: @unchecked Sendable {
    var result: Result<T, any Error>?
}

extension String {
    func leftPadded(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
}
