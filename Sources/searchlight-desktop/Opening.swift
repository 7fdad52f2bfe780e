import Foundation
import SearchlightDesktop
import SearchlightKit

/// Opening results and launching a full search (ActivateResult, Run, LaunchSearch).
extension DesktopSearch {
    /// Opens a result in its app (or its content URL with the default handler; only that with
    /// `contentURLOnly`), then records the engagement. The launcher runs off the cooperative pool:
    /// it waits for `gio` to hand over.
    func open(_ result: SearchResult, terms: [String], contentURLOnly: Bool = false) async throws -> ItemOpener.Opened {
        let opener = self.opener
        let opened: ItemOpener.Opened = try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                do {
                    continuation.resume(returning: try opener.open(result.item, openWith: contentURLOnly ? nil : result.openWith,
                                                                   contentURL: result.contentURL, uri: result.activityURI))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
        Log.info("result opened", ["id": result.id, "command": opened.command.joined(separator: " ")])
        if let note = opened.note { Log.notice("declared desktop file missing; opened the content URL", ["id": result.id, "note": note]) }
        await engaged(result, terms: terms)
        return opened
    }

    /// KRunner's "search in the app" action on a match: the match's app, resolved with the
    /// daemon now, launched with `searchlight-query:TEXT` when it continues searches.
    func continueSearch(in result: SearchResult, text: String) async throws {
        guard result.continuesSearch, let desktopID = result.openWith else {
            throw ContinuationRefused(description: "\(result.item.bundleIdentifier) does not continue searches (unit key ContinuesSearch, or `searchlight register --continues-search`)")
        }
        guard let query = SearchQueryContinuation(text: String(text.trimmingCharacters(in: .whitespacesAndNewlines).prefix(1024))) else {
            throw ContinuationRefused(description: "there is no search to continue")
        }
        let opener = self.opener
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            DispatchQueue.global().async {
                do {
                    _ = try opener.launch(desktopID: desktopID, uri: query.uri)
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
        Log.info("search continued in the app", ["bundle": result.item.bundleIdentifier, "desktop_id": desktopID])
    }

    /// LaunchSearch: the app whose results the user was looking at, when it continues searches
    /// (`continuation(for:)`), with a `searchlight-query:` URI; else, or when it cannot be
    /// launched, the Searchlight app (`searchlight.desktop`, a terminal search) with the terms.
    func launchSearch(_ terms: [String]) async throws {
        let opener = self.opener
        if let target = await continuation(for: terms) {
            do {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    DispatchQueue.global().async {
                        do {
                            _ = try opener.launch(desktopID: target.desktopID, uri: target.query.uri)
                            continuation.resume()
                        } catch {
                            continuation.resume(throwing: error)
                        }
                    }
                }
                Log.info("search continued in the app", ["bundle": target.bundle, "desktop_id": target.desktopID])
                return
            } catch {
                Log.notice("search not continued in the app; Searchlight's search instead",
                           ["bundle": target.bundle, "desktop_id": target.desktopID, "reason": "\(error)"])
            }
        }
        let uri = SearchTermsURI.uri(for: terms)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            DispatchQueue.global().async {
                do {
                    _ = try opener.launch(desktopID: "searchlight.desktop", uri: uri)
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
        Log.info("search launched", ["words": terms.count])  // the terms are the user's: never logged
    }
}

/// Why a search cannot be continued in a match's app (KRunner's `search-in-app`).
struct ContinuationRefused: Error, CustomStringConvertible {
    var description: String
}

/// `searchlight-search:TEXT` (percent-encoded): how LaunchSearch hands the terms to the
/// Searchlight app (`searchlight.desktop`, whose Exec is `searchlight-desktop --show-search %u`).
enum SearchTermsURI {
    static let scheme = "searchlight-search"

    static func uri(for terms: [String]) -> String {
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)..<Unicode.Scalar(128)))
        allowed.insert(charactersIn: "-._~")
        return scheme + ":" + (terms.joined(separator: " ").addingPercentEncoding(withAllowedCharacters: allowed) ?? "")
    }

    /// The text of such a URI; nil for anything else.
    static func text(of uri: String) -> String? {
        guard uri.lowercased().hasPrefix(scheme + ":") else { return nil }
        return String(uri.dropFirst(scheme.count + 1)).removingPercentEncoding
    }
}
