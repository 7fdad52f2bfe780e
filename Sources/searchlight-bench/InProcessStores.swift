import Foundation
import SearchlightKit
import SearchlightSemantic
import SearchlightStore

/// What the in-process scenarios that score the relevance set share (`apps`, `refine-order`):
/// the corpus as the relevance set donates it, the static table's encoder, and the options of
/// the stores they fill.
extension Corpus {
    /// The items without their debtags keywords (`a::b`: the tags are the relevance set's answer;
    /// the section stays), as `searchlight-semantic evaluate` and `tune` donate them.
    var untaggedItems: [SearchableItem] {
        entries.map { e -> SearchableItem in
            var item = e.searchableItem
            item.attributeSet.keywords = item.attributeSet.keywords?.filter { !$0.contains("::") }
            return item
        }
    }
}

struct InProcessStores {
    let encoder: StaticEncoder
    let options: StoreOptions

    /// Nil (and a progress line naming `scenario`) when the static table is missing.
    init?(scenario: String) throws {
        guard FileManager.default.fileExists(atPath: SemanticBench.staticTable) else {
            progress("\(scenario): skipped, no \(SemanticBench.staticTable) (run from the repository root)")
            return nil
        }
        encoder = try StaticEncoder(file: SemanticBench.staticTable)
        var options = StoreOptions()
        options.fullSync = false
        options.vectorEncoder = encoder
        // Built once by the scenario, by its own thread: the store's own background build after the
        // writes ran beside the explicit one on the 64k-item index, and one run in two measured
        // that index in a state where it answered no correction and other rankings.
        options.rankedIndexBuilds = false
        self.options = options
    }
}
