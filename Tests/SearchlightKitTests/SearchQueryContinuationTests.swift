import Testing
import TestThreads
import SearchlightKit

@Suite("SearchQueryContinuation", .onOwnThreads)
struct SearchQueryContinuationTests {
    @Test("a text round-trips through its searchlight-query: URI and the launch arguments")
    func roundTrip() {
        for text in ["natural bridges", "a/b?c#d%e", "été 東京 🌉", "\"quoted\" AND (x)"] {
            let c = SearchQueryContinuation(text: text)!
            #expect(c.uri.hasPrefix("searchlight-query:") && !c.uri.dropFirst(18).contains(" "))
            #expect(SearchQueryContinuation(uri: c.uri)?.text == text)
            #expect(SearchQueryContinuation.fromLaunchArguments(["/usr/bin/app", "--flag", c.uri])?.text == text)
        }
        #expect(SearchQueryContinuation(uri: "SEARCHLIGHT-QUERY:a%20b")?.text == "a b")
    }

    @Test("hostile or malformed input reads as nil")
    func hostile() {
        let refused = ["", "searchlight-query:", "searchlight-item:a/b", "searchlight-query:%", "searchlight-query:%zz",
                       "searchlight-query:%ff%fe", "searchlight-query:a%0Ab", "searchlight-query:a%00b",
                       "searchlight-query:" + String(repeating: "a", count: 1025),
                       "searchlight-query:" + String(repeating: "%41", count: 1025)]
        for uri in refused { #expect(SearchQueryContinuation(uri: uri) == nil, "\(uri.prefix(40))") }
        #expect(SearchQueryContinuation(text: String(repeating: "a", count: 1024)) != nil)
        #expect(SearchQueryContinuation.fromLaunchArguments(["searchlight-query:only-argv0"]) == nil)
    }
}
