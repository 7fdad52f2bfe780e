#if canImport(Glibc)
import Glibc
#endif

// `tags watch` takes SIGINT/SIGTERM with sigwait: they must be blocked before any thread starts.
// The other commands keep the default (Ctrl-C ends them).
if CommandLine.arguments.contains("watch") { Signals.block() }
await TagsCommand.run()
