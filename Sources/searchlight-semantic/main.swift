import Foundation
import SearchlightSemantic

// searchlight-semantic: the semantic layer's offline tools (Docs/SemanticSearch.md). Measurements
// here are meant for release builds: `swift build -c release --product searchlight-semantic`.

let usage = """
    usage: searchlight-semantic COMMAND [options]

      embed-vocabulary --output FILE.f32         every vocabulary token alone through the transformer
                                                 ([CLS] token [SEP], mean-pooled): the static table's input
      encoder-speed [--threads 1,2] [--tokens 8,16,32]
      word-table [--repeats 200]   malloc in use after loading the transformer, a 16-token query's CPU
                                   (SEARCHLIGHT_WORD_TABLE_ON_HEAP=1: the word table on the heap)
                                                 query embedding wall and CPU time, documents/s, per weights form
      static-speed [--table FILE]                static encoder documents/s on one core, and its
                                                 cosine to the transformer on held-out corpus documents
      index-speed [--sizes 64k,1m | --index FILE] [--probes 32,48] [--depths 2000,4000] [--train-sample N] [--train-iterations N]
                                                 vector search time and recall@10 of the prefilter (with
                                                 the partition: probes, rescoring depths; its build time),
                                                 and the fold of near-duplicates on each query's 100 nearest
      evaluate [--judgements FILE] [--transformer-subset N]
                                                 nDCG@10 and recall@100: BM25, vector, hybrid (RRF k=60)
      donate-speed [--clients 4] [--batch 500] [--runs 2] [--only with|without]
                                                 the corpus donated to an IndexStore without and with the
                                                 static encoder: items/s and CPU µs per item
      refine-speed [--count 256] [--batch 16] [--threads 1] [--pause-after 3]
                                                 background refinement with the transformer: items/s, and
                                                 how long it takes to stop once told to yield
      long-query-speed [--repeats 20]
                                                 a 60 KB CJK query: tokenizer and transformer CPU time
      tune [--weights 0.3,0.5] [--floors 0.3,0.35] [--ks 60] [--confident-hits 10] [--confident-factors 0.15]
           [--exact-first 0,1] [--min-gain 0] [--documents N] [--verbose] [--per-query FILE] [--show TAG,…] [--store FILE [--refine [--threads 2]]]
           [--fold-similarities 0,0.8 (0: no fold)] [--fold-depths 5,10] [--fold-demotions behind,0,0.25]
                                                 the hybrid ranking of IndexStore.userQuery on the relevance
                                                 set for each combination of settings, on all queries and on
                                                 the tuning and held-out halves (even and odd lines of a file
                                                 without them), the setting chosen on one measured on the other

    common options: --model-dir DIR (default: SEARCHLIGHT_MODEL_DIR, else the user-mode model folder),
                    --corpus FILE.jsonl.gz (default ../shared/corpus/debian-packages.jsonl.gz)
    """

var arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else {
    print(usage)
    exit(2)
}
arguments.removeFirst()
let options = ToolOptions(arguments)
do {
    switch command {
    case "embed-vocabulary": try embedVocabulary(options)
    case "encoder-speed": try encoderSpeed(options)
    case "static-speed": try staticSpeed(options)
    case "index-speed": try indexSpeed(options)
    case "evaluate": try evaluate(options)
    case "tune": try tune(options)
    case "donate-speed": try donateSpeed(options)
    case "refine-speed": try refineSpeed(options)
    case "long-query-speed": try longQuerySpeed(options)
    case "word-table": try wordTableCost(options)
    default:
        FileHandle.standardError.write(Data("searchlight-semantic: unknown command \(command)\n\(usage)\n".utf8))
        exit(2)
    }
} catch {
    FileHandle.standardError.write(Data("searchlight-semantic: \(error)\n".utf8))
    exit(1)
}
