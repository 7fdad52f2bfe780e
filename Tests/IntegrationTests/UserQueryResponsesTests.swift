import Foundation
import Testing
import TestThreads
import SearchlightKit

/// `UserQuery.responses` (CSUserQuery.responses, issue 38): the same answer as `run()`, as an
/// async sequence: every item of `items` in order with its own explanation and whether it is one
/// of `rankedItems`, then the suggestions.
@Suite("UserQuery.responses", .onOwnThreads, .serialized)
struct UserQueryResponsesTests {
    @Test("responses yields run()'s items in order, each with its explanation and ranked mark, then its suggestions")
    func responsesMatchRun() async throws {
        let daemon = try await DaemonProcess()
        let index = daemon.index("com.example.recipes")
        defer { Task { await index.close() } }
        try await index.indexSearchableItems((1...7).map { n in
            item("\(n)", title: "Pancakes number \(n)", text: n.isMultiple(of: 2) ? "pancakes with buttermilk" : "plain")
        } + [item("soup", title: "Tomato soup")])
        var context = UserQueryContext()
        context.maxRankedResultCount = 3
        context.maxSuggestionCount = 3
        context.explain = true
        let query = UserQuery(userQueryString: "pancake", userQueryContext: context, index: index)
        let response = try await query.run()
        #expect(response.items.count == 7)
        #expect(response.rankedItems.map(\.uniqueIdentifier) == response.items.prefix(3).map(\.uniqueIdentifier),
                "rankedItems are the first maxRankedResultCount of items (what SDK.md tells a UI)")
        #expect(response.explanations.count == response.items.count)
        #expect(!response.suggestions.isEmpty)

        var items: [UserQuery.Item] = []
        var suggestions: [QuerySuggestion] = []
        for try await element in query.responses {
            switch element {
            case .item(let item):
                #expect(suggestions.isEmpty, "an item after a suggestion")
                items.append(item)
            case .suggestion(let suggestion): suggestions.append(suggestion)
            }
        }
        #expect(items.map(\.item.uniqueIdentifier) == response.items.map(\.uniqueIdentifier))
        #expect(items.map(\.explanation) == response.explanations)
        #expect(items.allSatisfy { $0.explanation != nil })
        #expect(items.map(\.isRanked) == [true, true, true, false, false, false, false])
        #expect(suggestions == response.suggestions)

        // Without explain, no explanations; breaking out early ends the sequence.
        context.explain = false
        var first: UserQuery.Item?
        for try await element in UserQuery(userQueryString: "pancake", userQueryContext: context, index: index).responses {
            if case .item(let item) = element { first = item; break }
        }
        #expect(first != nil && first?.explanation == nil && first?.isRanked == true)
    }
}
